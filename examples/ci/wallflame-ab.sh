#!/bin/sh
# wallflame A/B gate for any CI (GitLab, Jenkins, Buildkite...): build the base and the head of
# the program in this job, profile them in turns on this machine (`wallflame ab`), and fail on
# a regression (exit 1) or when the runs cannot tell (exit 7).  Both sides run on the same
# runner in the same job, so the machine's model, frequency and neighbours are the same for
# both; a baseline recorded on another machine would not be.
#
#   BASE_REF=origin/main sh examples/ci/wallflame-ab.sh
#
# Needs root (or perf_event_paranoid <= 1 and CAP_SYS_PTRACE) and wallflame installed
# (./scripts/setup.sh).  Adapt BUILD and RUN to your program.
set -eu
BASE_REF=${BASE_REF:-origin/main}
BUILD='make -C samples bin/handlers'
RUN='samples/bin/handlers --duration 30'   # ended by wallflame when each window closes

# what an earlier job left in a reused workspace: its base worktree and its A/B
rm -rf .wallflame-base wallflame-ab && git worktree prune
git worktree add --detach .wallflame-base "$BASE_REF"
(cd .wallflame-base && sh -c "$BUILD")
sh -c "$BUILD"
status=0
# 3 rounds to start with; more while the verdict is inconclusive and 600 s are not spent
wallflame ab --base ".wallflame-base/$RUN" --head "$RUN" \
  --rounds 3 --budget 600 --duration 10 -o wallflame-ab || status=$?
git worktree remove --force .wallflame-base
if [ -f wallflame-ab/summary.md ]; then cat wallflame-ab/summary.md; fi
exit "$status"   # 0 pass, 1 regression, 7 inconclusive; 2-6 the A/B could not run
