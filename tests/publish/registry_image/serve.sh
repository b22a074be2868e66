#!/bin/sh
# With REGISTRY_TEST_USER and REGISTRY_TEST_PASSWORD set, the registry asks for basic auth
# (bcrypt htpasswd, the password read from stdin so it is on no command line).
set -eu
if [ -n "${REGISTRY_TEST_USER:-}" ]; then
    printf '%s' "$REGISTRY_TEST_PASSWORD" | htpasswd -Bic /tmp/htpasswd "$REGISTRY_TEST_USER"
    export REGISTRY_AUTH=htpasswd REGISTRY_AUTH_HTPASSWD_REALM=agentbake-test REGISTRY_AUTH_HTPASSWD_PATH=/tmp/htpasswd
    unset REGISTRY_TEST_PASSWORD
fi
exec docker-registry serve /etc/docker/registry/config.yml
