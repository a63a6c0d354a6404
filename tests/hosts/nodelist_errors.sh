#!/bin/bash
# nodelist_errors.sh: bad ++nodelist input needs no test bed — each case is refused before
# any PE starts, with an error naming the file, the line or the host, and the fix.
#   nodelist_errors.sh COVERSE_RUN PROGRAM
set -u
run="$1"
prog="$2"
dir="$(mktemp -d /tmp/coverse-nodelist.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
log="$dir/log"
failures=0

# expect STATUS TEXT -- ARGS...: coverse-run ARGS exits STATUS and prints TEXT.
expect() {
    local want="$1" text="$2"
    shift 3
    "$run" "$@" >"$log" 2>&1 </dev/null
    local got=$?
    if [ "$got" != "$want" ] || ! grep -qF -- "$text" "$log"; then
        echo "FAIL: coverse-run $*: status $got (expected $want), expected the text: $text" >&2
        sed 's/^/  | /' "$log" >&2
        failures=$((failures + 1))
    fi
}

printf 'group main\nhost localhost ++cpus 2\nhots other\n' >"$dir/keyword"
expect 2 "nodelist $dir/keyword:3: unknown keyword 'hots'" -- ++nodelist "$dir/keyword" +p2 "$prog"
printf 'group main\nhost a ++cpus zero\n' >"$dir/cpus"
expect 2 "nodelist $dir/cpus:2: ++cpus needs a count of 1 to 65536, not 'zero'" -- \
    ++nodelist "$dir/cpus" "$prog"
printf 'host a ++speed 3\n' >"$dir/option"
expect 2 "option '++speed' is not supported by coverse-run" -- ++nodelist "$dir/option" "$prog"
printf 'group other\nhost a\n' >"$dir/group"
expect 2 "has no host in group 'main'; add lines 'group main' and 'host NAME'" -- \
    ++nodelist "$dir/group" "$prog"
expect 2 "cannot read the nodelist '$dir/missing'" -- ++nodelist "$dir/missing" "$prog"
expect 2 "++ppn places PEs on the hosts of a ++nodelist; give one" -- ++ppn 2 "$prog"
# With ssh (the default) every host name must resolve before anything starts.
printf 'group main\nhost localhost\nhost no-such-host.invalid\n' >"$dir/unknown"
expect 1 "the nodelist $dir/unknown:3 names host 'no-such-host.invalid', which does not resolve" -- \
    ++nodelist "$dir/unknown" +p2 "$prog"
# Hosts named in a group other than main are found with ++nodegroup.
expect 1 "host 'no-such-host.invalid'" -- ++nodelist "$dir/unknown" ++nodegroup main +p2 "$prog"

[ "$failures" = 0 ] || exit 1
echo "nodelist_errors: ok"
