#!/bin/sh
# shellcheck disable=SC2154,SC2034
## The part of the resident service's conversation that both sh first stages share
## (dispatcher.sh and hookstage.sh, at their @ASK@), rendered into them by
## gpunode/runtime/firststage.py: the request and its first answer. Before it: the FIFOs
## $r and $w made and held as fds 8 and 9, $svc the service's directory, $tmo the timeout.
## After it: the first answer in $ans (or "timeout"), the requests FIFO closed again.
## SC2154, SC2034: those variables are the stage's.
  exec 7<>"$svc/requests"
  # a line of its own, whatever a writer before left unterminated
  printf '\n%s\n' "@REQUEST@" >&7
  # the watchdog: "timeout" after $tmo s unless killed (with its sleep) at the first answer;
  # the sleep holds none of the caller's files (its stdio are the container's)
  (
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    @SLEEP@ "$tmo" </dev/null >/dev/null 2>&1 8>&- 9>&- & s=$!
    wait "$s" && echo timeout >&8
  ) 7>&- </dev/null >/dev/null 2>&1 & wd=$!
  IFS= read -r ans <&8
  kill "$wd" 2>/dev/null
  exec 7>&-
