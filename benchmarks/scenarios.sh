#!/bin/sh
# Every broker scenario of benchmarks/README.md against a fresh `trionsq serve`,
# pinned as that README explains (broker on CPU 0, generators on CPU 1), one after
# another. Usage: benchmarks/scenarios.sh [port]   (needs `make` to have built .venv)
set -eu
cd "$(dirname "$0")/.."
PORT=${1:-14150}
ADDRESS=127.0.0.1:$PORT
HTTP_ADDRESS=127.0.0.1:$((PORT + 1))
BIN=.venv/bin
taskset -c 0 $BIN/trionsq serve --tcp-address "$ADDRESS" --http-address "$HTTP_ADDRESS" \
    --log-level warn --in-memory &
BROKER=$!
trap 'kill $BROKER 2>/dev/null || true' EXIT INT TERM
sleep 1
kill -0 $BROKER 2>/dev/null || { echo "the broker did not start" >&2; exit 1; }
L="taskset -c 1 $BIN/python benchmarks/loadgen.py"
A="--nsqd-tcp-address $ADDRESS --broker-pid $BROKER"
show() { grep -E "^loadgen|throughput|round trip|broker (pid|memory)|idle|held" || true; }

echo "== 1,000 idle connections (heartbeats every 1 s), first: RSS is cleanest in a fresh broker"
$L idle $A --connections 1000 --seconds 10 | show
echo "== PUB, one per round trip (generator spinning 50 µs on its own core)"
$L pub $A --spin-us 50 --seconds 5 --topic pub | show
echo "== MPUB batch 200, 200-byte bodies"
$L mpub $A --seconds 5 --topic mpub | show
echo "== fill 2.5M messages for the consume runs"
$L mpub $A --count 2500000 --seconds 60 --topic drain | show
for rdy in 2500 200; do
    echo "== consume RDY $rdy"
    $L consume $A --topic drain --rdy $rdy --count 1000000 | show
done
echo "== consume RDY 1"
$L consume $A --topic drain --rdy 1 --seconds 5 --spin-us 50 | show
echo "== fan-out: MPUB while 4 channels consume at RDY 2500 (consumers run 8 s, publisher 6 s)"
$L consume $A --topic fan -p 4 --channels 4 --rdy 2500 --seconds 8 > /tmp/trionsq-fanout.$$ 2>&1 &
CONSUMERS=$!
sleep 1.5
$L mpub $A --topic fan --seconds 6 | show
wait $CONSUMERS
show < /tmp/trionsq-fanout.$$
rm -f /tmp/trionsq-fanout.$$
echo "== in-flight timeouts: lateness against real time (idle, then under MPUB load)"
taskset -c 1 $BIN/python benchmarks/timeouts.py --nsqd-tcp-address "$ADDRESS"
taskset -c 1 $BIN/python benchmarks/timeouts.py --nsqd-tcp-address "$ADDRESS" --load
echo "== HTTP POST /pub, 16 keep-alive connections, 200-byte bodies"
if command -v wrk >/dev/null; then
    printf 'wrk.method = "POST"\nwrk.body = string.rep("a", 200)\n' > /tmp/trionsq-pub.$$.lua
    taskset -c 1 wrk -t 2 -c 16 -d 5s --latency -s /tmp/trionsq-pub.$$.lua \
        "http://$HTTP_ADDRESS/pub?topic=http" | grep -E "Requests/sec|Transfer|50%|99%"
    rm -f /tmp/trionsq-pub.$$.lua
fi
taskset -c 1 $BIN/python benchmarks/http_pub.py --address "$HTTP_ADDRESS" -c 16 --broker-pid $BROKER

echo "== durable (--data-path in a temporary directory): MPUB b200, then 3M consumed cold after a restart"
kill $BROKER 2>/dev/null || true
wait $BROKER 2>/dev/null || true
DATA=$(mktemp -d)
trap 'kill $BROKER 2>/dev/null || true; rm -rf "$DATA"' EXIT INT TERM
durable() {
    taskset -c 0 $BIN/trionsq serve --tcp-address "$ADDRESS" --http-address "" --data-path "$DATA" &
    BROKER=$!
    until $BIN/python -c "import socket,sys; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null; do
        kill -0 $BROKER 2>/dev/null || { echo "the broker did not start" >&2; exit 1; }
        sleep 0.1
    done
    A="--nsqd-tcp-address $ADDRESS --broker-pid $BROKER"
}
durable
$L mpub $A --seconds 5 --topic mpub | show
$L pub $A --spin-us 50 --seconds 5 --topic pub | show
$L mpub $A --count 3000000 --seconds 120 --topic drain | show
kill $BROKER; wait $BROKER 2>/dev/null || true
durable
$L consume $A --topic drain --rdy 2500 --count 3000000 --seconds 120 | show
du -sh "$DATA"
