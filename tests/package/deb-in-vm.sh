#!/usr/bin/env bash
# The Debian package on a root that has never seen it: a SoftRoCE VM's overlay (the host's root
# read-only, writes to tmpfs). Inside: apt installs the .deb (offline: its Depends are there),
# an example runs from the installed files only (env -i, from /, the library resolved in
# /usr/lib) over verbs on the VM's rxe0, the torch backend is where /usr/bin/python3 finds it;
# then dpkg removes it and none of its files is left.
#   deb-in-vm.sh BUILD_DIR      (a build configured for /usr is packaged as it stands)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
deb=$(bash "$root/scripts/package-deb.sh" "${1:?build dir}" | tail -1)
echo "package: $deb"
dpkg-deb -f "$deb" Package Version Depends
inside=$(mktemp /tmp/rdmacoll-deb-in-vm.XXXXXX.sh)
trap 'rm -f "$inside"' EXIT
cat > "$inside" <<'VM'
set -euo pipefail
deb=$1
fail() { echo "deb-in-vm: FAILED: $*"; exit 1; }
dpkg-query -W rdmacoll >/dev/null 2>&1 && fail "rdmacoll is installed before the test"
t=$(date +%s)
apt-get install -y -q --no-install-recommends "$deb" >/tmp/apt.log 2>&1 ||
  { cat /tmp/apt.log; fail "apt-get install"; }
echo "apt-get install: $(($(date +%s) - t)) s"
clean() { env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 RDMACOLL_DEBUG=info "$@"; }
cd /
libs=$(ldd /usr/libexec/rdmacoll/example_all_gather_flat)
grep -qE '=> (/usr)?/lib/x86_64-linux-gnu/librdmacoll.so.0 ' <<<"$libs" ||
  { echo "$libs"; fail "the example does not load the installed librdmacoll.so.0"; }
out=$(clean rdmacoll-run -n 2 /usr/libexec/rdmacoll/example_all_gather_flat 2>&1) || { echo "$out"; fail "C++ example"; }
echo "$out" | grep -v "^\[.\] rdmacoll INFO" || true
grep -qF "[1] tensor([1., 2., 2., 3.])" <<<"$out" || fail "C++ example printed the wrong values"
grep -q "transport=verbs" <<<"$out" || fail "the C++ example did not run over verbs"
# The torch backend from the installed package (found, not imported: importing torch under TCG
# takes a minute; the SoftRoCE suite runs the Python examples over verbs).
where=$(clean /usr/bin/python3 -c 'import importlib.util as u; print(u.find_spec("rdmacoll_torch").origin)')
[ "$where" = /usr/lib/python3/dist-packages/rdmacoll_torch/__init__.py ] || fail "rdmacoll_torch found at $where"
[ "$(clean pkg-config --modversion rdmacoll)" = "$(dpkg-query -W -f='${Version}' rdmacoll)" ] || fail "pkg-config"
files=$(dpkg -L rdmacoll | while read -r f; do [ -f "$f" ] && echo "$f"; done)
t=$(date +%s)
dpkg -r rdmacoll >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; fail "dpkg -r"; }
echo "dpkg -r: $(($(date +%s) - t)) s"
for f in $files; do [ -e "$f" ] && fail "$f is left after removal"; done
dpkg-query -W -f='${Status}' rdmacoll 2>/dev/null | grep -q "not-installed\|deinstall" ||
  ! dpkg-query -W rdmacoll >/dev/null 2>&1 || fail "dpkg still lists rdmacoll"
echo "deb-in-vm: installed, the example ran over verbs from /usr, removed cleanly ($(echo "$files" | wc -l) files)"
VM
"$root/tests/softroce/run-vm.sh" --timeout 900 --cwd / -- bash "$inside" "$deb"
