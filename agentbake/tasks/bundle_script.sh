#!/bin/bash
# Fills an agent bundle volume (mounted at /bundle) from a catalog agent image; run in that image as root
# with no network. Usage: bundle_script.sh COMMAND (the agent's command, label dev.agentbake.agent.command).
#
# Inside a task-image sandbox the volume is mounted read-only at /opt/agentbake:
#   agent/          the catalog image's /opt/agentbake/agent (the agent CLI, same paths as in its image)
#   bin/COMMAND     the agent's command (put on the agent's PATH only)
#   runtime/bin/    python3, git (and node for an npm agent): wrappers that run the binaries under
#                   runtime/libexec on runtime/lib's own glibc loader and libraries, so they need nothing
#                   from the task image but /bin/sh, whatever its distribution or glibc version
set -euo pipefail
command_name=$1
B=/bundle
R=$B/runtime
M=/opt/agentbake/runtime   # where runtime/ is seen in the sandbox
mkdir -p "$R/lib" "$R/libexec" "$R/bin" "$R/share" "$B/bin"
cp -a /opt/agentbake/agent "$B/agent"

# The shared libraries a binary loads (ldd's resolved paths and the loader), copied into runtime/lib.
copy_libs() {
    ldd "$1" 2>/dev/null | sed -n -e 's|.*=> \(/[^ ]*\) .*|\1|p' -e 's|^[[:space:]]*\(/[^ ]*\) (.*|\1|p' |
        while read -r lib; do cp -L -n "$lib" "$R/lib/"; done
}

# runtime/bin/NAME runs BINARY through the bundle's loader (--library-path wins over LD_LIBRARY_PATH; a task
# image's LD_PRELOAD, built for its own glibc, is dropped); extra `export` lines come first, extra arguments
# before the caller's.
relocate() {
    local binary=$1 name=$2 exports=${3:-} arguments=${4:-}
    cp -L "$binary" "$R/libexec/$name"
    copy_libs "$binary"
    loader=$(cd "$R/lib" && ls ld-linux-x86-64.so.2)
    printf '#!/bin/sh\nunset LD_PRELOAD\n%sexec %s/lib/%s --library-path %s/lib %s/libexec/%s %s"$@"\n' \
        "$exports" "$M" "$loader" "$M" "$M" "$name" "$arguments" > "$R/bin/$name"
    chmod 755 "$R/bin/$name"
}

# python: the forwarder's (the relay to the gateway). It finds its stdlib at runtime/lib/pythonX.Y.
python=$(readlink -f /opt/agentbake/venv/bin/python3)
version=$(basename "$python")
relocate "$python" python3
cp -a "/usr/lib/$version" "$R/lib/$version"
rm -rf "$R/lib/$version"/{test,idlelib,tkinter,turtledemo,ensurepip,lib2to3,pydoc_data,site-packages,dist-packages}
for module in "$R/lib/$version"/lib-dynload/*.so; do copy_libs "$module"; done

# git: the harness's workdir snapshot and diff. Its helpers (auto maintenance) are this same wrapper.
cp -a /usr/share/git-core/templates "$R/share/git-templates"
relocate /usr/bin/git git "export GIT_EXEC_PATH=$M/bin GIT_TEMPLATE_DIR=$M/share/git-templates; "

# Replaces a path in binaries by another of the same length (argv: old new file...).
REPOINT='
import sys
old, new, *files = (a.encode() for a in sys.argv[1:])
assert len(old) == len(new)
for name in files:
    with open(name, "rb") as f:
        data = f.read()
    if old in data:
        with open(name, "wb") as f:
            f.write(data.replace(old, new))
'

# The agent's command: a native binary runs as it is (it uses the task image's glibc); a script's
# interpreter (`#!/usr/bin/env node`) is relocated like python, so the task's own node (or none) never matters;
# a script of a venv's (a pip agent's, under agent/) runs on the bundle's python with that venv's packages.
target=$(readlink -f "$(command -v "$command_name")")
case "$target" in
/opt/agentbake/agent/*) ;;
*) echo "agentbake: $command_name resolves to $target, outside /opt/agentbake/agent" >&2; exit 2 ;;
esac
if [ "$(head -c 4 "$target" | od -An -c | tr -d ' ')" = '177ELF' ]; then
    ln -s "$target" "$B/bin/$command_name"
elif venv=$(head -n 1 "$target" | sed -n -e 's|^#! *\(/opt/agentbake/agent\)/bin/python[0-9.]*$|\1|p') &&
    [ -f "$venv/pyvenv.cfg" ]; then
    # The venv's packages are added by `site` in the process (PYTHONPATH would reach the agent's commands); the
    # libraries its extension modules load go beside python's.
    packages=$("$venv/bin/python3" -I -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    find "$venv" -type f \( -name '*.so' -o -name '*.so.[0-9]*' \) | while read -r module; do copy_libs "$module"; done
    code='import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name="__main__")'
    printf "#!/bin/sh\nexec %s/bin/python3 -I -c '%s' %s %s \"\$@\"\n" "$M" "$code" "$packages" "$target" > "$B/bin/$command_name"
    chmod 755 "$B/bin/$command_name"
else
    interpreter=$(head -n 1 "$target" | sed -n -e 's|^#! *\(/usr/bin/env \)\{0,1\}\([^ ]*\).*|\2|p')
    interpreter=$(basename "$interpreter")
    arguments=
    if [ "$interpreter" = node ]; then
        # Node's process.execPath is the loader here: a CLI re-spawning itself by it (Gemini CLI and Qwen Code do,
        # with node flags the loader takes for its own) gets this wrapper instead.
        printf 'process.execPath = "%s/bin/node";\n' "$M" > "$R/share/node-exec-path.cjs"
        arguments="--require $M/share/node-exec-path.cjs "
    fi
    relocate "$(readlink -f "$(command -v "$interpreter")")" "$interpreter" "" "$arguments"
    # Debian's node loads some builtins from /usr/share/nodejs at that path: the bundle carries a copy at
    # a path of the same length, and its copies of node's libraries name that one instead.
    if [ -d /usr/share/nodejs ]; then
        cp -a /usr/share/nodejs "$B/nj"
        python3 -I -S -c "$REPOINT" /usr/share/nodejs /opt/agentbake/nj $(find "$R/lib" "$R/libexec" -maxdepth 1 -type f)
    fi
    printf '#!/bin/sh\nexec %s/bin/%s %s "$@"\n' "$M" "$interpreter" "$target" > "$B/bin/$command_name"
    chmod 755 "$B/bin/$command_name"
fi
chmod -R a+rX,go-w "$B"
