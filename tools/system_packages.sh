#!/bin/sh
# The Debian packages the tests need: PortAudio (sounddevice), Chromium (the browser page's test),
# HAProxy and nginx (deploy/'s configurations, run or checked by tests/test_deploy.py).
# Installs the missing ones with apt-get when run as root on Debian; otherwise stops with one line
# naming the command. Usage: tools/system_packages.sh PYTHON
python=${1:-python3}
missing=""
"$python" -c "import ctypes.util, sys; sys.exit(ctypes.util.find_library('portaudio') is None)" || missing="$missing libportaudio2"
[ -n "${CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
[ -x /usr/sbin/haproxy ] || missing="$missing haproxy"
[ -x /usr/sbin/nginx ] || missing="$missing nginx"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing the system packages the tests need:$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    exit $?
fi
echo "make test needs system packages:$missing; install them with: sudo apt-get install$missing" >&2
exit 1
