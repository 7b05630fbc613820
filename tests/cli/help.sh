# Every command answers --help: exit 0, a usage line on stdout, nothing on stderr.
# The commands are read from `ztrain --help` itself (main.c prints them from the
# table it dispatches with), so a new command is checked the moment it exists.
# -h and `help` work too, and --help wins over other flags (even missing required ones).
. "$(dirname "$0")/lib.bash"

"$ZTRAIN" --help >"$TMP/top" 2>"$TMP/top.err" || fail "ztrain --help exited $?"
[ -s "$TMP/top.err" ] && fail "ztrain --help wrote to stderr: $(cat "$TMP/top.err")"
cmds=$(awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}' "$TMP/top")
n=$(printf '%s\n' "$cmds" | grep -c .)
[ "$n" -ge 13 ] || fail "ztrain --help lists $n commands: $(cat "$TMP/top")"

for c in $cmds; do
    for h in --help -h; do
        "$ZTRAIN" "$c" "$h" >"$TMP/out" 2>"$TMP/err"
        rc=$?
        [ "$rc" -eq 0 ] || fail "ztrain $c $h exited $rc: $(head -3 "$TMP/err")"
        grep -qi "usage" "$TMP/out" || fail "ztrain $c $h printed no usage on stdout: $(head -3 "$TMP/out")"
        [ -s "$TMP/err" ] && fail "ztrain $c $h wrote to stderr: $(head -3 "$TMP/err")"
    done
done

# --help after other flags, and on a verb of a command with verbs
"$ZTRAIN" launch --num_processes 2 --help >"$TMP/out" 2>&1 && grep -q "usage: ztrain launch" "$TMP/out" ||
    fail "ztrain launch --num_processes 2 --help: $(head -3 "$TMP/out")"
"$ZTRAIN" config validate --help >"$TMP/out" 2>&1 && grep -q "usage" "$TMP/out" ||
    fail "ztrain config validate --help: $(head -3 "$TMP/out")"
"$ZTRAIN" help >/dev/null || fail "ztrain help exited $?"
# an unknown command still fails, naming every command
expect_exit 2 "unknown command 'frobnicate' \(commands: train, eval" -- "$ZTRAIN" frobnicate
finish
