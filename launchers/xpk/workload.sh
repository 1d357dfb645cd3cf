#!/bin/bash
# Build and run `xpk workload create` for parallel_wan on a TPU slice (or several).
#
#   launchers/xpk/workload.sh --cluster my-cluster --workload wan-t2v-1 --tpu-type v5p-16 \
#       --num-slices 1 --docker-image gcr.io/my-project/parallel_wan:latest [--dry-run] -- \
#       mesh=dp2_cp4 model=wan2.2_t2v_a14b checkpoint_dir=/ckpt/Wan2.2-T2V-A14B-Diffusers 'prompt=a cat surfing'
#
# Everything after `--` is a Hydra override for `python -m parallel_wan.run backend=jax`, which
# every TPU host runs; the hosts find each other from the variables GKE and XPK set
# (parallel_wan/launch/). The mesh spans every chip of every slice: with --num-slices N > 1,
# dp must be a multiple of N (dp crosses slices over DCN; ring and ulysses stay in a slice).
# --dry-run prints the command and exits 0 without needing xpk.
#
# Preemption: --max-restarts N (default 3) lets the JobSet restart the workload N times. When a
# pod is told to stop (SIGTERM: spot capacity reclaimed, a higher-priority workload, a node
# upgrade), the run finishes its denoising step, saves its state and exits 75; the container
# command turns that into exit 143 ("ended by SIGTERM"), which xpk restarts on (other exit codes
# fail the workload), and the restarted run resumes -- from output_dir=, which must then be a
# persistent shared path (a mounted bucket): the pods' own disks are gone after a restart.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: launchers/xpk/workload.sh --cluster NAME --workload NAME --tpu-type TYPE [--num-slices N]
           (--docker-image IMAGE | --base-docker-image IMAGE [--script-dir DIR])
           [--max-restarts N] [--project PROJECT] [--zone ZONE] [--xpk-flag FLAG]... [--dry-run] [--] [OVERRIDE]...
  --cluster            the GKE cluster xpk created (xpk cluster create)
  --workload           the workload name: lowercase letters, digits and '-', starting with a letter
  --tpu-type           the TPU slice type, e.g. v5p-16, v5litepod-16, v6e-8
  --num-slices         how many slices (default 1); > 1 needs a mesh whose dp is a multiple of it
  --docker-image       an image built from launchers/xpk/Dockerfile (code included)
  --base-docker-image  an image with the dependencies only; xpk adds --script-dir to it
  --script-dir         the folder xpk copies into the base image (default: the repository root)
  --max-restarts N     restarts of the whole workload after a preemption (default 3; 0: none);
                       the restarted run resumes from output_dir=, a persistent path (a bucket)
  --project, --zone    passed to xpk
  --xpk-flag FLAG      any other xpk flag, passed as given (repeat as needed)
  --dry-run            print the xpk command and exit
  OVERRIDE             Hydra overrides for python -m parallel_wan.run backend=jax
USAGE
}

# One argument as the shell reads it back: bare when safe, else in single quotes.
quote() {
    local sq="'" escaped="'\\''"  # a quote inside single quotes: close, escaped quote, reopen
    if [[ $1 =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//$sq/$escaped}"
    fi
}

join_quoted() {
    local out="" arg
    for arg in "$@"; do
        out+="${out:+ }$(quote "$arg")"
    done
    printf '%s' "$out"
}

die() {
    echo "launchers/xpk/workload.sh: error: $*" >&2
    echo "run with --help for the usage" >&2
    exit 2
}

cluster="" workload="" tpu_type="" num_slices=1 max_restarts=3 image="" base_image="" script_dir="" project="" zone=""
dry_run=0
extra=()
overrides=()
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --dry-run) dry_run=1; shift; continue ;;
        --) shift; overrides+=("$@"); break ;;
        --*=*) flag=${1%%=*}; value=${1#*=}; shift ;;
        --*) flag=$1; (($# >= 2)) || die "$flag needs a value"; value=$2; shift 2 ;;
        *) overrides+=("$1"); shift; continue ;;
    esac
    case "$flag" in
        --cluster) cluster=$value ;;
        --workload) workload=$value ;;
        --tpu-type) tpu_type=$value ;;
        --num-slices) num_slices=$value ;;
        --max-restarts) max_restarts=$value ;;
        --docker-image) image=$value ;;
        --base-docker-image) base_image=$value ;;
        --script-dir) script_dir=$value ;;
        --project) project=$value ;;
        --zone) zone=$value ;;
        --xpk-flag) extra+=("$value") ;;
        *) die "unknown option $flag (xpk's own flags go through --xpk-flag $flag=VALUE)" ;;
    esac
done

[[ -n $cluster ]] || die "--cluster is required: the GKE cluster to run on (see xpk cluster list)"
[[ -n $workload ]] || die "--workload is required: a name for this run, e.g. --workload wan-t2v-1"
[[ $workload =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] ||
    die "--workload $workload: use lowercase letters, digits and '-', starting with a letter (a Kubernetes name)"
[[ -n $tpu_type ]] || die "--tpu-type is required: the slice type, e.g. --tpu-type v5p-16"
[[ $num_slices =~ ^[1-9][0-9]*$ ]] || die "--num-slices $num_slices: give a whole number ≥ 1"
[[ $max_restarts =~ ^[0-9]+$ ]] || die "--max-restarts $max_restarts: give a whole number ≥ 0"
if [[ -n $image && -n $base_image ]]; then
    die "--docker-image and --base-docker-image both given: pass one (a full image, or a base image xpk adds the code to)"
fi
[[ -n $image || -n $base_image ]] ||
    die "--docker-image or --base-docker-image is required: build one from launchers/xpk/Dockerfile"
[[ -z $script_dir || -n $base_image ]] || die "--script-dir goes with --base-docker-image, not --docker-image"

# The command every TPU host runs, quoted so that the container's shell reads back each
# override as one argument.
run_command=$(join_quoted python -m parallel_wan.run backend=jax "${overrides[@]}")
if ((max_restarts > 0)); then
    # xpk runs the command in a subshell and sends that subshell the pod's SIGTERM: pass it on
    # to the run (once; the wait loop outlives the trap), and turn the run's preempted code 75
    # into 143, an exit code xpk restarts the JobSet on (it fails the workload on most others).
    run_command+=" & pid=\$!; trap 'kill -TERM \$pid 2>/dev/null; t=1' TERM;"
    run_command+=" while :; do t=0; wait \$pid; rc=\$?; [ \$t = 1 ] || break; done;"
    run_command+=" if [ \$rc = 75 ]; then echo 'parallel_wan: preempted, state saved: exit 143 so that the workload restarts and resumes'; exit 143; fi;"
    run_command+=" exit \$rc"
fi

cmd=(xpk workload create --cluster "$cluster" --workload "$workload" --tpu-type "$tpu_type" --num-slices "$num_slices"
     --max-restarts "$max_restarts")
if [[ -n $image ]]; then
    cmd+=(--docker-image "$image")
else
    repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    cmd+=(--base-docker-image "$base_image" --script-dir "${script_dir:-$repo_root}")
fi
[[ -z $project ]] || cmd+=(--project "$project")
[[ -z $zone ]] || cmd+=(--zone "$zone")
cmd+=("${extra[@]}" --command "$run_command")

if ((num_slices > 1)); then
    echo "note: $num_slices slices: dp spans the slices, so pick a mesh whose dp is a multiple of $num_slices" \
        "(e.g. mesh=dp2_cp4 on 2 slices of 4 chips); ring × ulysses fills each slice" >&2
fi

if ((max_restarts > 0)); then
    has_output_dir=0
    for arg in "${overrides[@]}"; do [[ $arg == output_dir=* ]] && has_output_dir=1; done
    if ((!has_output_dir)); then
        echo "note: --max-restarts $max_restarts: a restarted workload resumes only from the same output_dir;" \
            "give output_dir= on a persistent shared path (e.g. a mounted bucket), else each restart starts over" >&2
    fi
fi

if ((dry_run)); then
    join_quoted "${cmd[@]}"
    echo
    exit 0
fi
command -v xpk >/dev/null || die "xpk is not on PATH: pip install xpk (or use --dry-run to print the command)"
exec "${cmd[@]}"
