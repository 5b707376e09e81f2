#!/usr/bin/env bash
# Follows README.md top to bottom in a fresh clone of this repository and
# runs every command of its ```sh blocks that needs no GPU, no network and
# no downloaded checkpoint, as written, failing on the first that fails.
#
#   scripts/readme-walkthrough.sh           # as written (make-model writes the 16 GB llama3-8b shape)
#   scripts/readme-walkthrough.sh --quick   # what CI runs: checkpoints made with --layers 1, make test skipped
#
# The clone is of the committed HEAD, in a temporary directory removed at
# the end (KEEP=1 keeps it).
set -euo pipefail
quick=0
nomodel=0 # set when the disk has no room for make-model's checkpoint
[[ "${1:-}" == "--quick" ]] && quick=1
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/readme-walkthrough-XXXXXX")"
if [[ "${KEEP:-0}" != 1 ]]; then trap 'rm -rf "$work"' EXIT; fi
git clone -q "$root" "$work/repo"
cd "$work/repo"

ran=0 skipped=0
skip() { echo "skip ($1): $2"; skipped=$((skipped + 1)); }

in_sh=0
while IFS= read -r line; do
	case "$line" in
	'```sh') in_sh=1; continue ;;
	'```'*) in_sh=0; continue ;;
	esac
	(( in_sh )) || continue
	cmd="${line%%#*}"                      # drop the comment
	cmd="${cmd%"${cmd##*[![:space:]]}"}"   # and trailing blanks
	[[ -z "$cmd" ]] && continue
	case "$cmd" in
	*cuda*|*h200*) skip "needs a GPU" "$cmd"; continue ;;
	*" pull "*|*Qwen/*|*meta-llama/*) skip "needs the network" "$cmd"; continue ;;
	*Llama-3.1-8B*|*Qwen3-8B*|*chat.json*) skip "needs a downloaded checkpoint" "$cmd"; continue ;;
	"make test") if (( quick )); then skip "quick: CI runs it already" "$cmd"; continue; fi ;;
	esac
	if (( nomodel )) && [[ "$cmd" == *llama3-8b* ]]; then
		skip "no room for the checkpoint (see above)" "$cmd"; continue
	fi
	if (( quick )) && [[ "$cmd" == *make-model* ]]; then
		cmd="$cmd --layers 1"
		# One layer of the 8B shape still carries its 2.1 GB of embeddings.
		avail=$(df -Pk . | awk 'NR==2 {print $4}')
		if (( avail < 6 * 1024 * 1024 )); then
			nomodel=1
			skip "under 6 GB free on this disk for a 2.5 GB checkpoint" "$cmd"; continue
		fi
	fi
	echo "+ $cmd"
	start=$SECONDS
	if ! bash -c "$cmd" >"$work/out" 2>"$work/err"; then
		echo "FAILED ($((SECONDS - start)) s): $cmd" >&2
		tail -20 "$work/out" "$work/err" >&2
		exit 1
	fi
	tail -3 "$work/out" | sed 's/^/  | /'
	ran=$((ran + 1))
done < README.md
echo "readme walkthrough: $ran commands ran, $skipped skipped"
(( ran >= (nomodel ? 3 : 8) )) || { echo "too few commands ran: the README's blocks changed shape?" >&2; exit 1; }
