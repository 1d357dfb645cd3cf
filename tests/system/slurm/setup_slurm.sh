#!/bin/bash
# A real SLURM cluster on this one machine, for testing launch scripts (sbatch/srun/scontrol)
# for real: munged, slurmctld and one slurmd per fake node (all on this host, different ports).
# Debian 12 / Slurm 22.05, run as root; no systemd needed; cgroups used where writable.
# tests/test_slurm_cluster.py starts it once per test session (and skips where it cannot run:
# not root, no apt-get, the install failed).
# Measured on a 2-core Debian 12 VM: apt install (8 packages, 3.5 MB) + configure + start
# 4.6 s; configure + start alone 0.15-0.4 s. Tests can then run `sbatch --wait ...` (returns
# the job's exit code) and read $SLURM_TEST_DIR/state/jobcomp.txt (state + exit code per run).
#
#   setup_slurm.sh [start]   install (apt) if needed, configure, start; idempotent: a cluster
#                            already up with the same configuration is left as it is
#   setup_slurm.sh stop      cancel every job, stop the daemons this script started (by PID)
#   setup_slurm.sh status    sinfo, squeue and the daemons' PIDs
#
# Settings (environment):
#   SLURM_TEST_DIR       state, logs, pid files, jobcomp.txt, fake devices (default /tmp/slurm-localhost)
#   SLURM_TEST_NODES     number of nodes n1..nN, all on this host (default 2)
#   SLURM_TEST_CPUS      CPUs each node declares, whatever the host has (default 8)
#   SLURM_TEST_GPUS      fake GPUs each node declares, gres gpu (default 8; 0: no GRES). Jobs asking
#                        --gpus-per-node get SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES, no device.
#   SLURM_TEST_MEMORY    MB each node declares (default 8000)
#   SLURM_TEST_KILLWAIT  seconds from SIGTERM to SIGKILL on cancel/requeue/time limit (default 10)
#   SLURM_TEST_GRACETIME seconds from SIGTERM to SIGKILL when preempted (partition debug, default 15)
#   SLURM_TEST_REQUEUE_DELAY  AuthInfo=cred_expire: a requeued job waits this + 1 s before it
#                        may start again (default: unset, Slurm's 120 s)
#   SLURM_TEST_SCHED_INTERVAL  seconds between the main scheduling passes, which start a requeued
#                        job once it may start (default 5; Slurm's default is 60)
#   SLURM_TEST_PROCTRACK cgroup | linuxproc | pgid (default: cgroup where a cgroup v1 freezer
#                        hierarchy is writable, else linuxproc)
#   SLURM_CONF           the slurm.conf to write (default /etc/slurm/slurm.conf, where the
#                        client commands look without SLURM_CONF); gres.conf goes beside it
set -euo pipefail

DIR=${SLURM_TEST_DIR:-/tmp/slurm-localhost}
NODES=${SLURM_TEST_NODES:-2}
CPUS=${SLURM_TEST_CPUS:-8}
GPUS=${SLURM_TEST_GPUS:-8}
MEMORY=${SLURM_TEST_MEMORY:-8000}
KILLWAIT=${SLURM_TEST_KILLWAIT:-10}
GRACETIME=${SLURM_TEST_GRACETIME:-15}
REQUEUE_DELAY=${SLURM_TEST_REQUEUE_DELAY:-}
SCHED_INTERVAL=${SLURM_TEST_SCHED_INTERVAL:-5}
CONF=${SLURM_CONF:-/etc/slurm/slurm.conf}
CONF_DIR=$(dirname "$CONF")
TEMPLATE=$(dirname "$(readlink -f "$0")")/slurm.conf.template
HOST=$(uname -n | cut -d. -f1)
MARK="# rendered by setup_slurm.sh"
T0=${EPOCHREALTIME/./}

say() { local us=$((${EPOCHREALTIME/./} - T0)); printf 'setup_slurm: [%3d.%01ds] %s\n' $((us / 1000000)) $((us / 100000 % 10)) "$*"; }
die() { echo "setup_slurm: error: $*" >&2; exit 1; }

node_names() { local i; for ((i = 1; i <= NODES; i++)); do echo "n$i"; done; }
nodelist() { ((NODES == 1)) && echo n1 || echo "n[1-$NODES]"; }

is_prog() {  # is_prog PID NAME: that process is alive (not a zombie) and is the named program
    local comm state
    read -r comm 2>/dev/null <"/proc/$1/comm" || return 1  # not $(<...): a missing file ends a set -e script
    read -r _ _ state _ 2>/dev/null <"/proc/$1/stat" || return 1
    [[ $comm == "$2" && $state != Z ]]
}

# A PID from a pid file, only if that process is alive and is the named program. (The
# daemons delete their pid file as soon as they get SIGTERM, seconds before they exit.)
live_pid() {
    local pid
    read -r pid 2>/dev/null <"$1" || return 1
    [[ $pid =~ ^[0-9]+$ ]] && is_prog "$pid" "$2" || return 1
    echo "$pid"
}

stop_pid() {  # stop_pid FILE NAME: SIGTERM, wait up to 15 s for the process to end, then SIGKILL
    local pid i
    pid=$(live_pid "$1" "$2") || return 0
    kill "$pid"
    for ((i = 0; i < 150; i++)); do
        is_prog "$pid" "$2" || { say "stopped $2 (pid $pid)"; return 0; }
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    say "killed $2 (pid $pid) after 15 s"
}

proctrack() {  # which proctrack plugin: cgroup needs a writable cgroup v1 freezer hierarchy
    local want=${SLURM_TEST_PROCTRACK:-auto} probe=/sys/fs/cgroup/freezer/setup_slurm_probe_$$
    if [[ $want == auto ]]; then
        if mkdir "$probe" 2>/dev/null; then rmdir "$probe"; want=cgroup; else want=linuxproc; fi
    fi
    echo "$want"
}

render() {
    local gres="" ports=$((17000 + 1)) authinfo="# AuthInfo=cred_expire=120"
    ((GPUS > 0)) && gres="Gres=gpu:$GPUS"
    ((NODES > 1)) && ports="[17001-$((17000 + NODES))]"
    [[ -n $REQUEUE_DELAY ]] && authinfo="AuthInfo=cred_expire=$REQUEUE_DELAY"
    echo "$MARK"
    sed -e "s|@HOST@|$HOST|g" -e "s|@STATE@|$DIR/state|g" -e "s|@NODES@|$(nodelist)|g" \
        -e "s|@PORTS@|$ports|g" -e "s|@CPUS@|$CPUS|g" -e "s|@MEMORY@|$MEMORY|g" -e "s|@GRES@|$gres|g" \
        -e "s|@KILLWAIT@|$KILLWAIT|g" -e "s|@GRACETIME@|$GRACETIME|g" -e "s|@PROCTRACK@|$PROCTRACK|g" \
        -e "s|@AUTHINFO@|$authinfo|g" -e "s|@SCHED_INTERVAL@|$SCHED_INTERVAL|g" "$TEMPLATE" |
        if ((GPUS > 0)); then cat; else grep -v '^GresTypes='; fi
}

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null; then
        return 0
    fi
    say "installing slurmctld slurmd slurm-client munge (apt)"
    local pkgs=(slurmctld slurmd slurm-client munge)
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${pkgs[@]}" >"$DIR/apt.log" 2>&1 || {
        apt-get update -q >>"$DIR/apt.log" 2>&1
        apt-get install -y -q --no-install-recommends "${pkgs[@]}" >>"$DIR/apt.log" 2>&1
    } || { tail -20 "$DIR/apt.log" >&2; die "apt-get install failed (log: $DIR/apt.log)"; }
    say "installed"
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged
    cp /run/munge/munged.pid "$DIR/munged.pid"  # stop ends munged only when this script started it
    munge -n | unmunge >/dev/null || die "munged started but munge -n | unmunge fails"
    say "munged started (pid $(cat "$DIR/munged.pid"))"
}

hosts_entries() {
    # The node names must resolve: jobs meet at the first node of SLURM_JOB_NODELIST (n1).
    # Appended, not edited in place (/etc/hosts is often a bind mount in containers).
    local missing=() n
    for n in "$HOST" $(node_names); do getent hosts "$n" >/dev/null || missing+=("$n"); done
    ((${#missing[@]} == 0)) || { echo "127.0.0.1 ${missing[*]}  $MARK" >>/etc/hosts; say "/etc/hosts: 127.0.0.1 ${missing[*]}"; }
}

fake_gpus() {
    ((GPUS > 0)) || { rm -f "$CONF_DIR/gres.conf"; return 0; }
    mkdir -p "$DIR/dev"
    local i
    for ((i = 0; i < GPUS; i++)); do
        [[ -e $DIR/dev/nvidia$i ]] && continue
        # A character device (that of /dev/null) keeps slurmd quiet; a plain file works too
        # (slurmd logs "is not a valid character or block device") where mknod is not allowed.
        mknod "$DIR/dev/nvidia$i" c 1 3 2>/dev/null || touch "$DIR/dev/nvidia$i"
    done
    echo "NodeName=$(nodelist) Name=gpu File=$DIR/dev/nvidia[0-$((GPUS - 1))]" >"$CONF_DIR/gres.conf.new"
}

wait_idle() {
    local i states
    for ((i = 0; i < 300; i++)); do
        states=$(sinfo -h -N -o '%T' 2>/dev/null | sort -u | tr '\n' ' ')
        [[ -n $states && $states =~ ^((idle|mixed|allocated)\ )+$ ]] && { say "nodes up: $(sinfo -h -N -o '%N=%T' | sort -u | tr '\n' ' ')"; return 0; }
        sleep 0.1
    done
    sinfo -N >&2 || true
    tail -5 "$DIR"/state/log/*.log >&2 || true
    die "nodes not idle after 30 s (logs: $DIR/state/log)"
}

running() {  # every daemon alive and slurmctld answering
    live_pid "$DIR/state/slurmctld.pid" slurmctld >/dev/null || return 1
    local n
    for n in $(node_names); do live_pid "$DIR/state/slurmd-$n.pid" slurmd >/dev/null || return 1; done
    scontrol ping 2>/dev/null | grep -q UP
}

stop_daemons() {
    local f n d
    for f in "$DIR"/state/slurmd-*.pid; do if [[ -e $f ]]; then stop_pid "$f" slurmd; fi; done
    stop_pid "$DIR/state/slurmctld.pid" slurmctld
    # proctrack/cgroup: slurmd leaves its (empty) cgroup v1 directories slurm_<node> behind
    for n in $(node_names); do
        while read -r d; do rmdir "$d" 2>/dev/null || true; done < <(find /sys/fs/cgroup/*/"slurm_$n" -depth -type d 2>/dev/null)
    done
}

start() {
    [[ $(id -u) == 0 ]] || die "run as root (slurmd and munged need it)"
    mkdir -p "$DIR"
    [[ -r $TEMPLATE ]] || die "no template $TEMPLATE"
    install
    start_munge
    hosts_entries
    mkdir -p "$CONF_DIR"
    PROCTRACK=$(proctrack)
    render >"$CONF.new"
    if [[ $PROCTRACK == cgroup ]]; then
        printf '%s\n' "$MARK" "CgroupPlugin=cgroup/v1" "CgroupMountpoint=/sys/fs/cgroup" \
            "ConstrainCores=no" "ConstrainRAMSpace=no" "ConstrainDevices=no" >"$CONF_DIR/cgroup.conf.new"
    fi
    fake_gpus
    if [[ -e $CONF ]] && ! grep -q "^$MARK" "$CONF" && [[ ! -e $CONF.orig ]]; then
        cp "$CONF" "$CONF.orig"; say "kept the previous $CONF as $CONF.orig"
    fi
    local same=1 f
    for f in "$CONF" "$CONF_DIR/gres.conf" "$CONF_DIR/cgroup.conf"; do
        [[ -e $f.new ]] && ! cmp -s "$f.new" "$f" && same=0
    done
    if running && ((same)); then
        rm -f "$CONF.new" "$CONF_DIR/gres.conf.new" "$CONF_DIR/cgroup.conf.new"
        say "already running with this configuration"
        wait_idle
        return 0
    fi
    stop_daemons
    mv "$CONF.new" "$CONF"
    ((GPUS == 0)) || mv "$CONF_DIR/gres.conf.new" "$CONF_DIR/gres.conf"
    if [[ -e $CONF_DIR/cgroup.conf.new ]]; then
        mv "$CONF_DIR/cgroup.conf.new" "$CONF_DIR/cgroup.conf"
    elif [[ -e $CONF_DIR/cgroup.conf ]] && grep -q "^$MARK" "$CONF_DIR/cgroup.conf"; then
        rm -f "$CONF_DIR/cgroup.conf"
    fi
    rm -rf "$DIR/state"
    mkdir -p "$DIR/state/ctld" "$DIR/state/log"
    local n
    for n in $(node_names); do mkdir -p "$DIR/state/spool-$n"; done
    slurmctld -c || die "slurmctld failed: $(tail -5 "$DIR/state/log/slurmctld.log")"
    for n in $(node_names); do
        slurmd -N "$n" || die "slurmd -N $n failed: $(tail -5 "$DIR/state/log/slurmd-$n.log")"
    done
    say "slurmctld + ${NODES} slurmd started ($CONF, proctrack/$PROCTRACK)"
    wait_idle
}

stop() {
    if scontrol ping 2>/dev/null | grep -q UP; then
        local jobs i
        jobs=$(squeue -h -o %i | tr '\n' ' ')
        if [[ -n ${jobs// /} ]]; then
            # shellcheck disable=SC2086
            scancel $jobs || true
            for ((i = 0; i < (KILLWAIT + 10) * 10; i++)); do
                [[ -z $(squeue -h -t R,CG -o %i) ]] && break
                sleep 0.1
            done
            say "cancelled jobs $jobs"
        fi
    fi
    stop_daemons
    stop_pid "$DIR/munged.pid" munged
    rm -f "$DIR/munged.pid"
}

status() {
    sinfo -N -o '%N %T %c %G' || true
    squeue || true
    local f
    for f in "$DIR"/state/slurmctld.pid "$DIR"/state/slurmd-*.pid "$DIR"/munged.pid; do
        if [[ -e $f ]]; then echo "$(basename "$f" .pid): $(live_pid "$f" "$(basename "$f" .pid | cut -d- -f1)" || echo dead)"; fi
    done
}

case ${1:-start} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: $0 [start|stop|status]" ;;
esac
