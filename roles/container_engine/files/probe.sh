# shellcheck shell=sh
# container_engine's probe: one read-only look at the node that also decides what is left
# to do, printed as one JSON object (tasks/main.yml reads it; engine.yml is included only
# when `todo` is not empty). POSIX sh, no gpunode: it runs on GPU-less nodes too.
#
#   sh -c "$(cat probe.sh)" probe WANT_ENABLED SOURCE_KNOWN DOCKERD_PATHS [PACKAGE...]
#
# WANT_ENABLED  true|false: container_engine_enabled
# SOURCE_KNOWN  true|false: container_engine_source has packages for this distribution
# DOCKERD_PATHS colon-separated paths; the engine is there when one of them exists
# PACKAGE       container_engine_extra_packages; `missing` lists those not installed
#
# {"dockerd": bool, "enabled": bool, "running": bool, "missing": [...], "todo": [...]}
# `enabled` and `running` as ansible.builtin.systemd_service judges them: is-enabled
# succeeds and is not only `indirect` or `alias`; active or activating. `todo`, in order:
#   source          the source has no packages here (engine.yml's first task fails on it)
#   install         no dockerd
#   extra packages  `missing` is not empty
#   service         wanted enabled: not enabled or not running; wanted disabled: enabled
want_enabled=$1 source_known=$2 dockerd_paths=$3
shift 3

dockerd=false
IFS=:
for path in $dockerd_paths; do
  if [ -e "$path" ]; then dockerd=true; fi
done
unset IFS

state=$(systemctl is-enabled docker 2>/dev/null) && rc=0 || rc=$?
case $rc:$state in
  0:indirect | 0:alias) enabled=false ;;
  0:*) enabled=true ;;
  *) enabled=false ;;
esac
case $(systemctl is-active docker 2>/dev/null) in
  active | activating) running=true ;;
  *) running=false ;;
esac

# a JSON string (package names are plain, but a quote or backslash must not break the JSON)
str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"; }
missing='' sep=''
for p in "$@"; do
  if command -v dpkg-query >/dev/null 2>&1; then
    case $(dpkg-query -W -f '${db:Status-Abbrev}' "$p" 2>/dev/null) in
      ?i*) continue ;;
    esac
  elif rpm -q --quiet "$p" 2>/dev/null; then
    continue
  fi
  missing="$missing$sep$(str "$p")" sep=,
done

todo='' sep=''
add() { todo="$todo$sep\"$1\"" sep=,; }
[ "$source_known" = true ] || add source
[ "$dockerd" = true ] || add install
[ -z "$missing" ] || add "extra packages"
if [ "$want_enabled" = true ]; then
  { [ "$enabled" = true ] && [ "$running" = true ]; } || add service
else
  [ "$enabled" = false ] || add service
fi

printf '{"dockerd": %s, "enabled": %s, "running": %s, "missing": [%s], "todo": [%s]}\n' \
  "$dockerd" "$enabled" "$running" "$missing" "$todo"
