#!/usr/bin/env bash
# Issue 27: each distribution installs alone, with raiprotocol, in a clean virtual environment, and
# every one of its modules imports and its commands answer --help. A dependency used but not
# declared fails here, not on an operator's or a student's machine (the suite's own .venv has all
# four packages, which would hide it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
for dist in ${DISTS:-client server worker}; do
  v="$root/$dist"
  python3 -m venv "$v"
  # from copies: setuptools leaves build/ folders beside the sources it builds
  rm -rf "$root/src" && mkdir "$root/src" && cp -r protocol "$dist" "$root/src/"
  if ! "$v/bin/pip" install -q --disable-pip-version-check "$root/src/protocol" "$root/src/$dist" >"$root/pip.log" 2>&1; then
    cat "$root/pip.log" >&2; echo "check_packages: installing $dist failed" >&2; exit 1
  fi
  pkg="rai$dist"
  "$v/bin/python" - "$pkg" <<'PY'
import importlib, pkgutil, sys
pkg = importlib.import_module(sys.argv[1])
names = [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".") if ".migrations" not in m.name and not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(f"{sys.argv[1]}: {len(names)} modules import with only its declared dependencies")
PY
  case $dist in
    client) cmds="raiclient" ;;
    server) cmds="raiserver raid" ;;
    worker) cmds="raiworker" ;;
  esac
  for cmd in $cmds; do "$v/bin/$cmd" --help >/dev/null; done
done
