#!/bin/sh
# Prepare simulated nodes (started with `gpunode sim up -i INVENTORY`) for the suites, as
# provisioning would: gpunode as Docker's default runtime (with CDI where Docker has it),
# a CDI spec for podman, and a workload image with Python in both engines. Usage:
#   tests/infra/prepare_sim.sh IMAGE NODE...
set -eu
image=$1; shift
for node in "$@"; do
  cdi=""
  if docker exec "$node" dockerd --version | grep -Eq 'version (2[5-9]|[3-9][0-9])\.'; then cdi=--cdi; fi
  docker exec "$node" gpunode runtime configure docker --set-as-default $cdi --json >/dev/null
  docker exec "$node" sh -c 'systemctl restart docker && for i in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done'
  docker exec "$node" sh -c 'gpunode runtime refresh && gpunode cdi generate --output /etc/cdi/nvidia.yaml'
  docker save "$image" | docker exec -i "$node" docker load -q
  docker exec "$node" sh -c "docker save $image | podman --cgroup-manager cgroupfs load -q" >/dev/null
  echo "$node: ready (docker runtime gpunode default${cdi:+, CDI}; $image)"
done
