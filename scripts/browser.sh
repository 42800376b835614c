#!/usr/bin/env bash
# The portal's browser tests drive Debian's Chromium (package `chromium`): installed here when it
# is missing and this user may install packages. Without it those tests fail, saying so.
set -uo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
install() {
  DEBIAN_FRONTEND=noninteractive $1 apt-get install -y -q chromium >/dev/null 2>&1 || {
    $1 apt-get update -q >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive $1 apt-get install -y -q chromium >/dev/null 2>&1
  }
}
if command -v apt-get >/dev/null 2>&1; then
  echo "[scripts/browser] installing Debian's chromium for the browser tests" >&2
  if [ "$(id -u)" = 0 ]; then
    install ""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    install "sudo -n"
  fi
fi
command -v chromium >/dev/null 2>&1 ||
  echo "[scripts/browser] chromium is not installed: the browser tests will fail" >&2
exit 0
