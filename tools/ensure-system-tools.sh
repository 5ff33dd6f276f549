#!/usr/bin/env bash
# Makes sure the tools the system tests (`*.system.test.ts`, `npm run test:system`) run are here, and
# installs the missing ones with apt-get (Debian/Ubuntu; as root, or through sudo):
#   haproxy         Debian haproxy         (/usr/sbin/haproxy: replicas behind an L4 proxy, `haproxy -c`)
#   wrk             Debian wrk             (the bench's load generator)
#   promtool        Debian prometheus      (`promtool check` / `test rules` of infra/prometheus)
#   Compose         Debian docker-compose  (`config` of docker-compose.yml), unless `docker compose` works
# kubectl (with kustomize 5) has no Debian package new enough (Debian's kubernetes-client has
# kustomize 2), so it is only checked. Exits 1, saying what is missing and why, if anything is still
# missing afterwards.
set -euo pipefail

# The Debian package of each tool that is not here (checked the way the tests run them).
missing_packages() {
  local missing=()
  command -v haproxy >/dev/null 2>&1 && [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  docker compose version >/dev/null 2>&1 || docker-compose version >/dev/null 2>&1 || missing+=(docker-compose)
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
[ -z "$packages" ] || problems+=("still missing after apt-get install: $packages")
if [ -x /usr/sbin/haproxy ] && ! command -v haproxy >/dev/null 2>&1; then
  problems+=("haproxy is at /usr/sbin/haproxy but /usr/sbin is not on PATH: add it")
fi
if ! kubectl kustomize --help >/dev/null 2>&1; then
  problems+=("kubectl is not installed (k8s.system.test.ts compares the tests' kustomize with kubectl's kustomize 5): install kubectl >= 1.27 as https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/ describes")
fi
if [ ${#problems[@]} -gt 0 ]; then
  printf 'ensure-system-tools: %s\n' "${problems[@]}" >&2
  exit 1
fi

compose_version="$(docker compose version 2>/dev/null || docker-compose version 2>/dev/null | head -n 1)"
echo "ensure-system-tools: $(haproxy -v | head -n 1); $(wrk -v 2>&1 | head -n 1); $(promtool --version 2>&1 | head -n 1); $compose_version; kubectl $(kubectl version --client 2>/dev/null | tr '\n' ' ')"
