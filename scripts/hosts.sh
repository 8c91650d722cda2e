#!/usr/bin/env bash
# Test hosts on one machine: N network namespaces ("hosts") joined by veth pairs to a bridge that lives in its own
# namespace, each host's link optionally shaped with tbf, and an mpirun that starts one rank per host over TCP.
# As on a cluster, the launcher's control traffic has a network of its own (a second bridge, never shaped), so a
# data link taken down (`ip -n HOST link set eth0 down`) leaves mpirun able to end the job.
#
#   scripts/hosts.sh up N [--rate RATE]     # RATE: a number and one of tc's units bit, kbit, mbit, gbit, tbit,
#                                           # bps, kbps, mbps, gbps, tbps (bytes), any case: 400mbit, 1gbit, ...
#   scripts/hosts.sh mpirun [-np K] [mpirun options] -- PROGRAM ARGS   # one rank on each of the first K hosts
#   scripts/hosts.sh down                   # removes everything `up` made (also after a failed run)
#   scripts/hosts.sh status                 # the set's namespaces and link, or that it has none (exit 0 both)
#
# Host i is namespace ${DPTRAIN_HOSTS}-h<i> with eth0 = 10.213.77.<i+1>/24 (data: the ranks' messages) and
# ctl0 = 10.213.78.<i+1>/24 (control: mpirun and its daemons); the switch is ${DPTRAIN_HOSTS}-sw.
# DPTRAIN_HOSTS (default "dptrain") names the set, so two sets (e.g. two tests) can exist side by side: each set
# is a separate group of namespaces, so they may reuse the same addresses. The name is 1 to 64 letters, digits, '-'
# or '_', starting with a letter or digit: it names the namespaces (files under /run/netns) and the folder
# /run/dptrain-hosts/NAME that `down` removes. Nothing is added to the root namespace: traffic can only go between
# the hosts of one set. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

SET="${DPTRAIN_HOSTS:-dptrain}"
SUBNET=10.213.77
CONTROL_SUBNET=10.213.78
STATE="/run/dptrain-hosts/$SET"
SWITCH="$SET-sw"

host_ns() { echo "$SET-h$1"; }
host_ip() { echo "$SUBNET.$(($1 + 1))"; }
die() { echo "hosts.sh: $*" >&2; exit 2; }

[[ "$SET" =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$ ]] || die "DPTRAIN_HOSTS '$SET' is not a set name (expected 1 to" \
  "64 letters, digits, '-' or '_', starting with a letter or digit, e.g. dptest-mine)"

# Whether $1 is a rate tc takes (env.sh's tc_rate_bits).
is_tc_rate() { tc_rate_bits "$1" > /dev/null; }

# Exit 77 ("skip") with one line when namespaces cannot be made here: tests turn it into a skip (or a failure
# under CI=true).
can_make_namespaces() {
  local probe="$SET-probe$$"
  if ! ip netns add "$probe" 2>/dev/null; then return 1; fi
  ip netns delete "$probe"
}

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$SET-(h[0-9]+|sw)$" || true); do
    # Ranks left behind by a failed run: processes inside our own namespaces only, killed by id.
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then kill -CONT $pids 2>/dev/null || true; kill -KILL $pids 2>/dev/null || true; fi
    ip netns delete "$ns" 2>/dev/null || true  # deleting a namespace deletes its end of every veth
  done
  rm -rf "$STATE"
}

up() {
  local n="${1:-}" rate=""
  [[ "$n" =~ ^[0-9]+$ ]] && (( 10#$n >= 1 && 10#$n <= 32 )) || die "up: N must be 1..32, got '${n}'"
  n=$((10#$n))  # 08 is eight, not an octal number bash refuses
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate)
        [ $# -ge 2 ] || die "up: --rate needs a value (RATE, e.g. 400mbit or 1gbit)"
        is_tc_rate "$2" || die "up: --rate '$2' is not a tc rate (expected a number of at least 8 bit/s and one" \
          "of the units bit, kbit, mbit, gbit, tbit, bps, kbps, mbps, gbps, tbps, e.g. 400mbit or 1gbit)"
        rate="$2"; shift 2 ;;
      *) die "up: unknown option '$1' (accepted: --rate RATE)" ;;
    esac
  done
  if ! can_make_namespaces; then
    echo "hosts.sh: cannot create network namespaces here (needs root and CAP_SYS_ADMIN)" >&2
    exit 77
  fi
  down
  trap 'down' ERR
  mkdir -p "$STATE"
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  ip -n "$SWITCH" link add br1 type bridge
  ip -n "$SWITCH" link set br1 up
  ip -n "$SWITCH" link set lo up
  local i hosts=()
  for ((i = 0; i < n; i++)); do
    local ns; ns=$(host_ns $i)
    ip netns add "$ns"
    ip -n "$SWITCH" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$SWITCH" link set "p$i" master br0 up
    ip -n "$ns" addr add "$(host_ip $i)/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$SWITCH" link add "c$i" type veth peer name ctl0 netns "$ns"
    ip -n "$SWITCH" link set "c$i" master br1 up
    ip -n "$ns" addr add "$CONTROL_SUBNET.$((i + 1))/24" dev ctl0
    ip -n "$ns" link set ctl0 up
    ip -n "$ns" link set lo up
    if [ -n "$rate" ]; then
      # Each host's sending side is shaped, as a NIC of that rate would be; the burst has to hold one GSO segment
      # (veth hands tbf up to 64 KiB at once; a smaller bucket drops it), and 100 ms of queue lets TCP's own
      # pacing, not drops, set the rate.
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 128kb latency 100ms
    fi
    hosts+=("$(host_ip $i)")
  done
  printf '%s\n' "${hosts[@]}" > "$STATE/hosts"
  echo "${rate:-unshaped}" > "$STATE/rate"
  # The rsh agent Open MPI calls instead of ssh: `agent HOST COMMAND...` runs COMMAND in HOST's namespace, with a
  # shell, as ssh would. The daemon stays in the foreground, the agent with it as an ssh session would: a daemon
  # that dies at start-up is then reported by mpirun at once, where a daemonized one left the launch hanging.
  cat > "$STATE/agent" <<EOF
#!/bin/sh
host="\$1"; shift
last=\${host##*.}
command=\$(echo "\$*" | sed 's/ --daemonize / /')
exec ip netns exec "$SET-h\$((last - 1))" sh -c "\$command"
EOF
  chmod +x "$STATE/agent"
  trap - ERR
  echo "hosts.sh: $n host(s) ${hosts[*]} on bridge $SWITCH/br0, link ${rate:-unshaped}; control on $CONTROL_SUBNET.0/24"
}

run_mpi() {
  [ -f "$STATE/hosts" ] || die "mpirun: no hosts (run 'scripts/hosts.sh up N' first)"
  local options=() np=""
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
      -np|-n|--np)  # the first NP hosts (default: all)
        [ $# -ge 2 ] || die "mpirun: $1 needs a value (how many hosts)"
        np="$2"; shift 2 ;;
      *) options+=("$1"); shift ;;
    esac
  done
  [ "${1:-}" = "--" ] || die "mpirun: expected 'mpirun [mpirun options] -- PROGRAM ARGS'"
  shift
  [ $# -ge 1 ] || die "mpirun: no program"
  local hosts n
  mapfile -t hosts < "$STATE/hosts"
  n=${#hosts[@]}
  if [ -n "$np" ]; then
    [[ "$np" =~ ^[0-9]+$ ]] && [ "$np" -ge 1 ] && [ "$np" -le "$n" ] || die "mpirun: -np $np, but there are $n hosts"
    n=$np
    hosts=("${hosts[@]:0:$n}")
  fi
  local list; list=$(printf '%s:1,' "${hosts[@]}"); list=${list%,}
  # mpirun runs in host 0 (so it reaches the others' daemons over the control subnet). TCP only (no shared memory
  # between "hosts"): the ranks' messages on the data subnet, the launcher's wire-up and control on the control
  # subnet; routed=direct: every daemon talks to mpirun itself, not through a tree of daemons that would need to
  # find one another first. rtc ^hwloc: the hosts share one machine's /dev/shm and hostname, and the daemons'
  # hwloc run-time control wrote the topology into shared memory at once and crashed in hwloc_shmem_topology_write
  # (about one launch in ten on 3 hosts; none in 30 without it). Binding is not used here. The eager limit above the
  # ring's 256 KiB pieces: a larger message waits for a clear-to-send, which on a shaped link queues behind the
  # other direction's data, and the ring then ran at half the rate at 2 hosts; socket buffers of 1 MiB keep that
  # queue short (the kernel's autotuning let a plain 8 MiB exchange take 1.5–2× its time now and then).
  exec ip netns exec "$(host_ns 0)" mpirun --host "$list" -np "$n" \
    --mca plm_rsh_agent "$STATE/agent" --mca plm_rsh_no_tree_spawn 1 --mca routed direct \
    --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET.0/24" --mca oob_tcp_if_include "$CONTROL_SUBNET.0/24" \
    --mca pml ob1 --mca rtc ^hwloc --mca btl_tcp_eager_limit 327680 \
    --mca btl_tcp_max_send_size 327680 --mca btl_tcp_sndbuf 1048576 --mca btl_tcp_rcvbuf 1048576 "${options[@]}" "$@"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  mpirun) shift; run_mpi "$@" ;;
  status)
    ip netns list | grep -E "^$SET-(h[0-9]+|sw)( |$)" || echo "hosts.sh: no hosts of set '$SET'"
    if [ -f "$STATE/rate" ]; then echo "link: $(cat "$STATE/rate")"; fi ;;
  *) die "usage: hosts.sh up N [--rate RATE] | mpirun [options] -- PROGRAM ARGS | down | status" ;;
esac
