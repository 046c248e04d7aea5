#!/bin/sh
# Builds the tiny job image rai/busybox from the host's busybox-static, with no registry:
#   apt-get install busybox-static && images/busybox/build.sh [TAG]
# A Docker worker offers it as rai's own (one layer, this command and label) when it starts; under
# another TAG, publish it: raiworker publish TAG
set -eu
tag=${1:-rai/busybox:latest}
bb=$(command -v busybox || true)
[ -n "$bb" ] || { echo "busybox is not installed (apt-get install busybox-static)" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/src" "$root/build"
cp "$bb" "$root/bin/busybox"
for app in $("$root/bin/busybox" --list); do
  [ "$app" = busybox ] || ln -s busybox "$root/bin/$app"
done
printf 'root:x:0:0::/root:/bin/sh\nrai:x:1000:1000::/build:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\nrai:x:1000:\n' > "$root/etc/group"
chmod 1777 "$root/tmp"
tar -C "$root" -c . | docker import -c 'CMD ["/bin/sh"]' -c 'LABEL rai.course="true"' - "$tag" >/dev/null
echo "built $tag"
