# Plays step $1 of $2 of a solve.sh (the file `step` beside this one) in the shell state the steps
# before it left, as one bash running the whole file would; written by agentbake's scripted model.
# The step runs as a script of its own, `solve.sh` in this folder: a first line restoring the state
# (the directory, variables, exported or not, functions, umask, shopt and set options, traps), the
# step, and a last line saving the state. A step that ends the script (exit, a failure under set -e,
# a kill) ends it for the steps after it too; an EXIT trap runs once, when the script ends.
if [ "$1" = --functions ]; then # sourced by the first line of solve.sh
  # Saves the state after the step for the next one's first line, leaving out every name that starts
  # with __agentbake_ (these) and bash's own variables. Called with stderr closed, so an xtrace the
  # script turned on does not show it. Builtins only: the script may have changed PATH.
  __agentbake_save() {
    __agentbake_status=$1 __agentbake_flags=$-
    set +o >| "$__agentbake_dir/options"
    set +euvx
    trap -p >| "$__agentbake_dir/traps"
    trap - ERR DEBUG RETURN
    shopt -p >| "$__agentbake_dir/shopt"
    compgen -v >| "$__agentbake_dir/names"
    declare -F >| "$__agentbake_dir/functions"
    local __agentbake_line __agentbake_name
    {
      printf 'cd -- %q\n' "$PWD"
      umask -p
      while IFS= read -r __agentbake_line; do
        case $__agentbake_line in *' login_shell' | *' restricted_shell') ;; *) printf '%s\n' "$__agentbake_line" ;; esac
      done < "$__agentbake_dir/shopt"
      while IFS= read -r __agentbake_name; do
        case $__agentbake_name in
          __agentbake_* | BASH* | _ | EUID | PPID | UID | SHELLOPTS | SHLVL | RANDOM | SRANDOM | SECONDS | LINENO) ;;
          HISTCMD | EPOCHREALTIME | EPOCHSECONDS | DIRSTACK | FUNCNAME | GROUPS | PIPESTATUS | PWD | OPTIND) ;;
          COLUMNS | LINES | COMP_WORDBREAKS) ;;
          *) declare -p -- "$__agentbake_name" 2> /dev/null ;;
        esac
      done < "$__agentbake_dir/names"
      while IFS= read -r __agentbake_line; do
        __agentbake_name=${__agentbake_line##* }
        case $__agentbake_name in __agentbake_*) continue ;; esac
        declare -f -- "$__agentbake_name"
        case ${__agentbake_line#declare -} in *x*' '*) printf 'export -f -- %q\n' "$__agentbake_name" ;; esac
      done < "$__agentbake_dir/functions"
      while IFS= read -r __agentbake_line; do printf '%s\n' "$__agentbake_line"; done < "$__agentbake_dir/traps"
      while IFS= read -r __agentbake_line; do
        case $__agentbake_line in *' verbose' | *' xtrace') ;; *) printf '%s\n' "$__agentbake_line" ;; esac
      done < "$__agentbake_dir/options"
      # verbose and xtrace last and in one command, so neither shows the restoring of the rest
      __agentbake_line=set
      case $__agentbake_flags in *v*) __agentbake_line+=" -v" ;; *) __agentbake_line+=" +v" ;; esac
      case $__agentbake_flags in *x*) __agentbake_line+=" -x" ;; *) __agentbake_line+=" +x" ;; esac
      printf '%s\n' "$__agentbake_line"
    } >| "$__agentbake_dir/state"
    : >| "$__agentbake_dir/finished"
    if [ "$2" != last ]; then trap - EXIT; fi
    return "$__agentbake_status"
  }
  return
fi
__agentbake_dir=$(cd -- "${BASH_SOURCE[0]%/*}" && pwd) || exit
__agentbake_said="${__agentbake_dir##*/}: solve.sh ended"
if [ -f "$__agentbake_dir/running" ]; then # the step before did not come back (a timeout killed it)
  echo 137 >| "$__agentbake_dir/ended" && rm -f -- "$__agentbake_dir/running"
fi
if [ -f "$__agentbake_dir/ended" ]; then
  IFS= read -r __agentbake_status < "$__agentbake_dir/ended"
  echo "$__agentbake_said before this step (exit $__agentbake_status); it does not run" >&2
  exit "$__agentbake_status"
fi
__agentbake_q=$(printf %q "$__agentbake_dir")
{
  printf '__agentbake_dir=%s; . "$__agentbake_dir/run" --functions' "$__agentbake_q"
  if [ -f "$__agentbake_dir/state" ]; then printf '; . "$__agentbake_dir/state"'; fi
  printf '\n'
  cat -- "$__agentbake_dir/step"
  if [ "$1" = "$2" ]; then echo '{ __agentbake_save "$?" last; } 2> /dev/null'; else echo '{ __agentbake_save "$?"; } 2> /dev/null'; fi
} >| "$__agentbake_dir/solve.sh" || exit
rm -f -- "$__agentbake_dir/finished" && : >| "$__agentbake_dir/running" || exit
bash "$__agentbake_dir/solve.sh"
__agentbake_status=$?
if [ ! -f "$__agentbake_dir/finished" ]; then # the step did not reach its last line
  echo "$__agentbake_status" >| "$__agentbake_dir/ended"
  echo "$__agentbake_said in this step (exit $__agentbake_status); the steps after it do not run" >&2
fi
rm -f -- "$__agentbake_dir/running"
exit "$__agentbake_status"
