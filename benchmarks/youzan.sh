#!/bin/sh
# Youzan extension scenarios of benchmarks/README.md against a fresh in-memory
# `trionsq serve`, pinned like scenarios.sh (broker on CPU 0, generators on CPU 1):
# tag dispatch next to untagged dispatch on the same ext-topic setup, then
# SUB_ORDERED over 4 partitions. Usage: benchmarks/youzan.sh [port]
set -eu
cd "$(dirname "$0")/.."
PORT=${1:-14160}
ADDRESS=127.0.0.1:$PORT
HTTP_ADDRESS=127.0.0.1:$((PORT + 1))
BIN=.venv/bin
COUNT=${COUNT:-1000000}
TAKE=$((COUNT * 8 / 10))  # consumers stop before the topic runs dry: a worker waiting
                          # for a share that is not there would stretch the run
taskset -c 0 $BIN/trionsq serve --tcp-address "$ADDRESS" --http-address "$HTTP_ADDRESS" \
    --log-level warn --in-memory &
BROKER=$!
trap 'kill $BROKER 2>/dev/null || true' EXIT INT TERM
until $BIN/python -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null; do
    kill -0 $BROKER 2>/dev/null || { echo "the broker did not start" >&2; exit 1; }
    sleep 0.1
done
L="taskset -c 1 $BIN/python benchmarks/loadgen.py"
A="--nsqd-tcp-address $ADDRESS --broker-pid $BROKER"
show() { grep -E "^loadgen|throughput|round trip|broker (pid|memory)" || true; }
create() {
    $BIN/python -c "import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1], method='POST'))" \
        "http://$HTTP_ADDRESS/topic/create?$1"
}

create "topic=untagged&ext=true"
create "topic=tagged&ext=true"
echo "== fill: $COUNT ext messages without tags; $COUNT with tag0..tag3 and untagged in turn"
$L mpub $A --topic untagged --tags 0 --count "$COUNT" --seconds 60 | show
$L mpub $A --topic tagged --tags 4 --count "$COUNT" --seconds 60 | show
echo "== untagged dispatch: 8 extend_support consumers, no desired_tag, RDY 200"
$L consume $A --topic untagged -p 8 --rdy 200 --desired-tags ",,,,,,," --count "$TAKE" --seconds 60 | show
echo "== tag dispatch: 8 consumers (tag0..tag3 and 4 untagged), RDY 200"
$L consume $A --topic tagged -p 8 --rdy 200 --desired-tags "tag0,tag1,tag2,tag3,,,," --count "$TAKE" --seconds 60 | show

create "topic=ordered&ordered=true&partition_num=4"
echo "== fill: 4 partitions of an ordered topic"
$L mpub $A --topic ordered -p 4 --partitions 4 --count 400000 --seconds 60 | show
echo "== SUB_ORDERED: one consumer per partition, RDY 50 (one message in flight per partition)"
$L consume $A --topic ordered -p 4 --ordered-partitions 4 --rdy 50 --count 50000 --seconds 60 | show
echo "== SUB_ORDERED with IDENTIFY ordered_window 50: up to 50 in flight per partition, in order"
# counts, not seconds: a run that drains the 350,000 left would report count / seconds
$L consume $A --topic ordered -p 4 --ordered-partitions 4 --rdy 50 --ordered-window 50 --count 250000 --seconds 60 | show
