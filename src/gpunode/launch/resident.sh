#!/bin/sh
# shellcheck disable=SC2034
## The part of the resident conversation both sh first stages share (dispatcher.sh and
## hookstage.sh, at their @RESIDENT_SH@), rendered into them by
## gpunode/launch/firststage.py: three functions. The protocol's names, words and fds
## (@P_...@) come from gpunode/launch/protocol.py, whose docstring tells the conversation.
## SC2034: the variables set here are the stages'.
# proc FILE: pid= and start= of the process a /proc/<pid>/stat file describes (its first
# field and its 22nd, the start time; the name in parentheses may hold blanks)
proc() {
  IFS= read -r st 2>/dev/null <"$1" || return 1
  pid=${st%% *} st=${st##*) }
  # shellcheck disable=SC2086 # the fields, split on blanks
  set -- $st
  start=${20-}
  case $pid$start in ''|*[!0-9]*) return 1 ;; esac
}
# ours: gpunode's resident service at $svc is there, ours and alive (the directory is this
# user's and no link; the pid file's process has the start time written beside its pid)
ours() {
  [ -n "$svc" ] && [ -d "$svc" ] && [ ! -h "$svc" ] && [ -O "$svc" ] || return 1
  IFS=' ' read -r spid sstart 2>/dev/null <"$svc/@P_PID_FILE@" || return 1
  case $spid in ''|*[!0-9]*) return 1 ;; esac
  proc "/proc/$spid/stat" && [ "$pid" = "$spid" ] && [ "$start" = "$sstart" ]
}
# ask KIND ARGC: this process's request of KIND (ARGC: its own arguments); its first answer
# in $ans, or none (ans empty, $why says why). Fails, having asked nothing, when it cannot
# make its FIFOs or its request. Held after it: the FIFOs as fds @P_FD_ANSWERS@ (read end)
# and @P_FD_STATUS@, named $r and $w, the request's file $q. The watchdog is a sleep, this
# shell's own child, holding the answers FIFO's write end and nothing of the caller's:
# when it ends, a stage still waiting reads end-of-file; at the first answer it is killed
# and reaped here, so it never outlives the stage that is waiting.
ask() {
  proc /proc/self/stat || return 1
  cv=$svc/@P_CONVERSATION_PREFIX@$pid.$start
  r=$cv@P_ANSWERS@ w=$cv@P_STATUS@ q=$svc/@P_REQUEST_PREFIX@$1.$pid.$start.$2 ans= why=
  @P_MKFIFO@ -m 600 "$r" "$w" 2>/dev/null || return 1
  exec @P_FD_ANSWERS@<>"$r" @P_FD_STATUS@<>"$w"
  @P_SLEEP@ "$tmo" </dev/null >/dev/null 2>&1 3>&- @P_FD_IN@<&- @P_FD_OUT@>&- @P_FD_ERR@>&- 7>&- @P_FD_STATUS@>&- &
  wd=$!
  exec @P_FD_ANSWERS@<"$r"
  if ! : 2>/dev/null >"$q"; then
    kill "$wd" 2>/dev/null; wait "$wd" 2>/dev/null
    exec @P_FD_ANSWERS@<&- @P_FD_STATUS@>&-
    rm -f "$r" "$w"
    return 1
  fi
  IFS= read -r ans <&@P_FD_ANSWERS@ || ans=
  ## end-of-file: the watchdog's end (the wait timed out) or the service's side closed. The
  ## watchdog's exit status tells which: 0 when it slept its time out, not 0 when still
  ## sleeping it is killed here. (Not kill's success, nor its state in /proc: an exiting
  ## process has closed its files, which is what woke this read, before it is a zombie,
  ## and kill succeeds on a zombie; a loaded machine showed both.)
  kill "$wd" 2>/dev/null
  if wait "$wd" 2>/dev/null; then
    why="gpunode's resident service ($svc, pid $spid) did not answer in $tmo s"
  else
    why="gpunode's resident service ($svc, pid $spid) ended the conversation without an answer (its log says why)"
  fi
  return 0
}
