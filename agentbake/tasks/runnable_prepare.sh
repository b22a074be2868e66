#!/bin/sh
# Run as root once, when agentbake builds a task's runnable image (FROM the task image, no agent in it):
# checks the tools the harness runs and gives the agent's user (an entry of the image's /etc/passwd, root
# included) its log and task dirs under its home. The workdir keeps the owner the image gave it; one the
# image lacks is made, the user's. Only what this script makes is given to the user.
# Usage: runnable_prepare.sh UID GID HOME WORKDIR
set -eu
uid=$1 gid=$2 home=$3 workdir=$4
missing=""
for tool in bash tar timeout mktemp id stat grep sed head tee chown mkdir rm cat sleep find readlink; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    echo "agentbake: the image lacks what agentbake's harness runs:$missing; install them in the task's Dockerfile" >&2
    exit 3
fi
for dir in "$home" "$home/logs" "$home/logs/agent" "$home/logs/verifier" "$home/task" "$workdir"; do
    [ -e "$dir" ] || { mkdir -p "$dir" && chown "$uid:$gid" "$dir"; }
done
rm -f "$0"
