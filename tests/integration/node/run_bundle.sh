#!/bin/sh
# Run an OCI bundle through a runtime the way containerd does (create, start, wait,
# delete) and print the container's output. usage: run_bundle.sh RUNTIME BUNDLE ID
set -u
rt=$1; bundle=$2; id=$3
log=$bundle/runtime.log
$rt --log "$log" --log-format json create --bundle "$bundle" "$id" >"$bundle/out" 2>"$bundle/err" </dev/null
rc=$?
if [ $rc -ne 0 ]; then
  echo "create failed ($rc): $(cat "$bundle/err")" >&2
  exit 3
fi
$rt start "$id"
for _ in $(seq 200); do
  state=$(runc state "$id" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  [ "$state" = stopped ] && break
  sleep 0.05
done
$rt delete -f "$id" >/dev/null 2>&1
cat "$bundle/out"
cat "$bundle/err" >&2
