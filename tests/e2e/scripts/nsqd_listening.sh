#!/bin/sh
# The kind of script that starts nsqd by name and scrapes its "listening on" lines.
# Usage: nsqd_listening.sh NSQD CERT KEY DATA_DIR; prints "TCP PORT", "HTTP PORT",
# "HTTPS PORT" and leaves nsqd running; its pid is the last line ("PID N").
set -eu
NSQD=$1 CERT=$2 KEY=$3 DIR=$4
LOG="$DIR/nsqd.log"
"$NSQD" --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --https-address=127.0.0.1:0 \
    --tls-cert="$CERT" --tls-key="$KEY" --data-path="$DIR" </dev/null >/dev/null 2>"$LOG" &
PID=$!
tries=0
until [ "$(grep -c 'listening on' "$LOG" || true)" -ge 3 ]; do
    tries=$((tries + 1))
    if [ $tries -gt 200 ] || ! kill -0 $PID 2>/dev/null; then
        cat "$LOG" >&2
        exit 1
    fi
    sleep 0.05
done
for kind in TCP HTTP HTTPS; do
    port=$(sed -n "s/.* $kind: listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p" "$LOG")
    echo "$kind $port"
done
echo "PID $PID"
