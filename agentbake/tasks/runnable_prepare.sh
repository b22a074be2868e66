#!/bin/sh
# Run as root once, when agentbake builds a task's runnable image (FROM the task image, no agent in it):
# checks the tools the harness runs, gives the agent its user, home and dirs, and the task's workdir.
# Usage: runnable_prepare.sh NAME UID GID HOME CREATE(1|0) WORKDIR
set -eu
name=$1 uid=$2 gid=$3 home=$4 create=$5 workdir=$6
missing=""
for tool in bash tar timeout mktemp id stat grep sed head tee chown mkdir rm cat sleep find readlink; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    echo "agentbake: the image lacks what agentbake's harness runs:$missing; install them in the task's Dockerfile" >&2
    exit 3
fi
if [ "$create" = 1 ]; then
    grep -q "^[^:]*:[^:]*:$gid:" /etc/group || echo "$name:x:$gid:" >>/etc/group
    echo "$name:x:$uid:$gid:agentbake agent:$home:/bin/bash" >>/etc/passwd
    if [ -f /etc/shadow ]; then echo "$name:!:19000:0:99999:7:::" >>/etc/shadow; fi
fi
mkdir -p "$home/logs/agent" "$home/logs/verifier" "$home/task" "$workdir"
chown -R "$uid:$gid" "$home" "$workdir"
rm -f "$0"
