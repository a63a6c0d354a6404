#!/bin/sh
# fan_out_shell.sh: a ++remote-shell that runs the PE on this host and counts how many remote
# starts are in progress at once, for fan_out.sh. coverse-run calls it as
#   fan_out_shell.sh DIR N HOST 'command line'
# (DIR and N come from the ++remote-shell value). Under DIR/lock it adds one to DIR/count and
# appends the new count to DIR/starts; the first starts then wait until N are in progress
# (at most 10 s: a launcher that starts fewer than N at once shows as a maximum below N),
# each holds 0.3 s so that starts a launcher should not have made yet overlap with it, takes
# itself off the count and execs the command line like ssh's remote /bin/sh would. Its whole
# life lies inside the launcher's "started, not yet registered", so the counts it writes
# never exceed what the launcher had starting.
if [ $# -ne 4 ]; then
    echo "usage: fan_out_shell.sh DIR N HOST 'command line'" >&2
    exit 255
fi
dir="$1"
n="$2"
line="$4"
# count_add D: count += D under the lock (written whole by rename: readers never see it empty)
count_add() {
    flock 9
    c=$(($(cat "$dir/count") + $1))
    echo "$c" >"$dir/count.$$"
    mv "$dir/count.$$" "$dir/count"
    [ "$1" -gt 0 ] && echo "$c" >>"$dir/starts"
    flock -u 9
}
exec 9>>"$dir/lock"
count_add 1
# The first starts wait until N are in progress (DIR/reached), at most 10 s (DIR/gave_up);
# later ones need not: the maximum is known to have reached N, or known not to.
i=0
while [ ! -e "$dir/reached" ] && [ ! -e "$dir/gave_up" ]; do
    if [ "$(cat "$dir/count")" -ge "$n" ]; then
        : >"$dir/reached"
    elif [ $i -ge 100 ]; then
        : >"$dir/gave_up"
    else
        sleep 0.1
        i=$((i + 1))
    fi
done
sleep 0.3
count_add -1
exec 9>&-
exec /bin/sh -c "$line"
