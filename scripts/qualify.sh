#!/usr/bin/env bash
# The qualification kit for real clusters: on the hosts of an Ansible inventory's `bench` group
# (two or more, rdmacoll installed: ansible/site.yml provisions and installs), perftest's
# ib_write_bw between ring neighbours, rdmacoll's all_gather busbw as a fraction of it, its
# per-call counters, the NICs' error counters before and after, and the fault matrix (a rank
# SIGKILLed, the link down 1 s, the link down past the retry budget). Writes report.md and
# busbw.png into the results folder and fails when a fault case did not end as it must.
#   scripts/qualify.sh INVENTORY [RESULTS_DIR] [ansible-playbook options...]
# docs/infiniband.md ("Qualifying a cluster") says what a healthy report looks like.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
inventory=${1:?usage: scripts/qualify.sh INVENTORY [RESULTS_DIR] [ansible-playbook options...]}
shift
results=$PWD/qualify-results
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then results=$(mkdir -p "$1" && cd "$1" && pwd); shift; fi
export ANSIBLE_CONFIG=${ANSIBLE_CONFIG:-$root/ansible/ansible.cfg}
ansible-playbook -i "$inventory" "$root/ansible/qualify.yml" -e "qualify_results=$results" "$@"
echo "qualify: the report is $results/report.md (plot: $results/busbw.png)"
