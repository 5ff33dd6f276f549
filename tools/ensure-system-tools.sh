#!/usr/bin/env bash
# Makes sure the tools the system tests (`*.system.test.ts`, `npm run test:system`) run are here, and
# installs the missing ones with apt-get (Debian/Ubuntu; as root, or through sudo):
#   haproxy         Debian haproxy         (/usr/sbin/haproxy: replicas behind an L4 proxy, `haproxy -c`)
#   wrk             Debian wrk             (the bench's load generator)
#   promtool        Debian prometheus      (`promtool check` / `test rules` of infra/prometheus)
#   Compose         Debian docker-compose  (`config` of docker-compose.yml), unless `docker compose` works
# kubectl (with kustomize 5) has no Debian package new enough (Debian's kubernetes-client has
# kustomize 2), so it is only checked. A tool counts as here when it runs, not when a file of that
# name exists. Exits 1, saying what is missing and why, if anything still does not run afterwards.
set -euo pipefail

# Whether the tool runs: `wrk -v` prints its version but exits 1, so its output is checked instead.
works() {
  case "$1" in
    haproxy) haproxy -v >/dev/null 2>&1 && /usr/sbin/haproxy -v >/dev/null 2>&1 ;;
    wrk) [[ "$(wrk -v 2>&1 || true)" == "wrk "* ]] ;;
    promtool) promtool --version >/dev/null 2>&1 ;;
    compose) docker compose version >/dev/null 2>&1 || docker-compose version >/dev/null 2>&1 ;;
    kubectl) kubectl kustomize --help >/dev/null 2>&1 ;;
  esac
}

# The Debian package of each tool that does not run here (checked the way the tests run them).
missing_packages() {
  local missing=()
  works haproxy || missing+=(haproxy)
  works wrk || missing+=(wrk)
  works promtool || missing+=(prometheus)
  works compose || missing+=(docker-compose)
  echo "${missing[@]}"
}

packages="$(missing_packages)"
if [ -n "$packages" ]; then
  echo "ensure-system-tools: installing with apt-get: $packages"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-system-tools: no apt-get on this machine: install the tools of these Debian packages yourself: $packages" >&2
    exit 1
  fi
  if [ "$(id -u)" = 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo)
  else
    echo "ensure-system-tools: need root (or password-less sudo) to run: apt-get install -y $packages" >&2
    exit 1
  fi
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null
fi

problems=()
packages="$(missing_packages)"
[ -z "$packages" ] || problems+=("still not working after apt-get install: $packages")
if [ -x /usr/sbin/haproxy ] && ! command -v haproxy >/dev/null 2>&1; then
  problems+=("haproxy is at /usr/sbin/haproxy but /usr/sbin is not on PATH: add it")
fi
if ! works kubectl; then
  problems+=("\`kubectl kustomize\` does not run (k8s.system.test.ts compares the tests' kustomize with kubectl's kustomize 5): install kubectl >= 1.27 as https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/ describes")
fi
if [ ${#problems[@]} -gt 0 ]; then
  printf 'ensure-system-tools: %s\n' "${problems[@]}" >&2
  exit 1
fi

# First lines through `sed -n 1p`, not `head -n 1`: head exits after one line, and a tool still writing
# then dies of SIGPIPE, which pipefail turns into this script's exit status (141) on some runs.
compose_version="$(docker compose version 2>/dev/null || docker-compose version 2>/dev/null | sed -n 1p)"
echo "ensure-system-tools: $(haproxy -v | sed -n 1p); $(wrk -v 2>&1 | sed -n 1p); $(promtool --version 2>&1 | sed -n 1p); $compose_version; kubectl $(kubectl version --client 2>/dev/null | tr '\n' ' ')"
