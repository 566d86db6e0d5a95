#!/usr/bin/env bash
# Provide the PyPI packages the greenlet tests run targets with (greenlet and
# gevent), one --target directory per CPython minor, next to the
# interpreters scripts/pythons.sh provided; and gunicorn (pure Python, no
# dependency: one directory for every minor) for red's prefork test.
#
# Usage: scripts/pypkgs.sh [--require-all]
#        scripts/pypkgs.sh --memray
#
#   --require-all  exit non-zero (listing what is missing) unless every GIL
#                  interpreter 3.10+ of the manifest got its packages.
#   --memray       instead: memray (the benchmarks' anchor for pyobs mem,
#                  scripts/bench_mem.sh) for each GIL minor, into
#                  $CACHE/pypkgs/memray-cp3XY/ (same pip, same rules); a minor
#                  without a wheel is listed on stderr, never an error; prints
#                  the directory.
#
# Environment:
#   PYOBS_PYTHONS_CACHE  cache dir (default /var/cache/pyobs-pythons)
#
# Layout: $CACHE/pypkgs/cp3XY/ holds greenlet and gevent for CPython 3.X
# (put it on PYTHONPATH); $CACHE/pypkgs/cp3XY/.ok records the pinned
# requirements once every interpreter of that minor imported them.
# $CACHE/pypkgs/gunicorn/ holds gunicorn, its .ok likewise.
#
# The wheels come from the machine's own pip configuration (index, find-links:
# no host name is written here), installed by one pip that can run (the last
# manifest interpreter with pip, else python3 -m pip) with --python-version and
# --abi for each minor, binary wheels only: no compiler is involved.
#
# Idempotent: a minor whose .ok matches the pins is only re-checked by
# importing the packages with its interpreters.
set -euo pipefail

CACHE=${PYOBS_PYTHONS_CACHE:-/var/cache/pyobs-pythons}
MANIFEST=$CACHE/interpreters.tsv
# Pinned: internal/greenlet keeps one layout per greenlet version; a new pin
# needs its layout there (TestLayoutsMatchDWARF checks them against the wheel).
PINS=(greenlet==3.5.6 gevent==26.9.0)
MEMRAY_PIN=memray==1.20.0
require_all=0
memray=0
[ "${1:-}" = "--require-all" ] && require_all=1
[ "${1:-}" = "--memray" ] && memray=1

[ -r "$MANIFEST" ] || { echo "pypkgs: no $MANIFEST: run scripts/pythons.sh first" >&2; exit 1; }

pip_cmd=()
while IFS=$'\t' read -r label ver argv; do
	[ -n "$label" ] || continue
	case $label in ft-*) continue ;; esac
	# shellcheck disable=SC2086
	if $argv -m pip --version >/dev/null 2>&1; then
		# shellcheck disable=SC2206
		pip_cmd=($argv -m pip) # the last one: the newest pip resolves best
	fi
done <"$MANIFEST"
if [ ${#pip_cmd[@]} -eq 0 ] && python3 -m pip --version >/dev/null 2>&1; then
	pip_cmd=(python3 -m pip)
fi
[ ${#pip_cmd[@]} -gt 0 ] || { echo "pypkgs: no interpreter with pip" >&2; exit 1; }

if [ $memray = 1 ]; then
	declare -A tried=()
	while IFS=$'\t' read -r label ver argv; do
		[ -n "$label" ] || continue
		case $label in ft-*) continue ;; esac
		minor=${ver%.*}
		tag=cp${minor/./}
		[ -z "${tried[$tag]:-}" ] || continue
		tried[$tag]=1
		dir=$CACHE/pypkgs/memray-$tag
		if [ "$(cat "$dir/.ok" 2>/dev/null)" != "$MEMRAY_PIN" ]; then
			echo "pypkgs: installing $MEMRAY_PIN for $minor into $dir" >&2
			rm -rf "$dir.tmp"
			if "${pip_cmd[@]}" install --quiet --disable-pip-version-check --root-user-action ignore \
				--target "$dir.tmp" --python-version "$minor" --implementation cp --abi "$tag" \
				--only-binary=:all: "$MEMRAY_PIN" >&2; then
				rm -rf "$dir"
				mv "$dir.tmp" "$dir"
			else
				rm -rf "$dir.tmp"
				echo "pypkgs: no $MEMRAY_PIN wheel for $minor" >&2
				continue
			fi
		fi
		# shellcheck disable=SC2086
		if PYTHONPATH=$dir $argv -c 'import memray' >/dev/null 2>&1; then
			echo "$MEMRAY_PIN" >"$dir/.ok"
		else
			echo "pypkgs: $label can't import memray from $dir" >&2
			rm -f "$dir/.ok"
		fi
	done <"$MANIFEST"
	echo "$CACHE/pypkgs"
	exit 0
fi

want="${PINS[*]}"
missing=()
declare -A done_minor=()
while IFS=$'\t' read -r label ver argv; do
	[ -n "$label" ] || continue
	case $label in ft-*) continue ;; esac # no free-threaded greenlet wheels
	minor=${ver%.*}
	[ "${minor%%.*}" = 3 ] && [ "${minor#*.}" -ge 10 ] || continue
	tag=cp${minor/./}
	dir=$CACHE/pypkgs/$tag
	if [ -z "${done_minor[$tag]:-}" ]; then
		if [ "$(cat "$dir/.ok" 2>/dev/null)" != "$want" ]; then
			echo "pypkgs: installing ${PINS[*]} for $minor into $dir" >&2
			rm -rf "$dir.tmp"
			if "${pip_cmd[@]}" install --quiet --disable-pip-version-check --root-user-action ignore \
				--target "$dir.tmp" --python-version "$minor" --implementation cp --abi "$tag" \
				--only-binary=:all: "${PINS[@]}" >&2; then
				rm -rf "$dir"
				mv "$dir.tmp" "$dir"
			else
				rm -rf "$dir.tmp"
				missing+=("$label")
				done_minor[$tag]=failed
				continue
			fi
		fi
		done_minor[$tag]=installed
	fi
	[ "${done_minor[$tag]}" = failed ] && { missing+=("$label"); continue; }
	# shellcheck disable=SC2086
	if PYTHONPATH=$dir $argv -c 'import greenlet, gevent' >/dev/null 2>&1; then
		echo "$want" >"$dir/.ok"
	else
		echo "pypkgs: $label can't import greenlet/gevent from $dir" >&2
		rm -f "$dir/.ok"
		missing+=("$label")
	fi
done <"$MANIFEST"

# gunicorn: a py3-none-any wheel without dependencies, for every minor.
GUNICORN_PIN=gunicorn==27.0.1
gdir=$CACHE/pypkgs/gunicorn
if [ "$(cat "$gdir/.ok" 2>/dev/null)" != "$GUNICORN_PIN" ]; then
	echo "pypkgs: installing $GUNICORN_PIN into $gdir" >&2
	rm -rf "$gdir.tmp"
	if "${pip_cmd[@]}" install --quiet --disable-pip-version-check --root-user-action ignore \
		--target "$gdir.tmp" --only-binary=:all: --no-deps "$GUNICORN_PIN" >&2; then
		rm -rf "$gdir"
		mv "$gdir.tmp" "$gdir"
		gok=1
		while IFS=$'\t' read -r label ver argv; do
			[ -n "$label" ] || continue
			minor=${ver%.*}
			[ "${minor%%.*}" = 3 ] && [ "${minor#*.}" -ge 10 ] || continue
			# shellcheck disable=SC2086
			if ! PYTHONPATH=$gdir $argv -c 'import gunicorn.app.wsgiapp' >/dev/null 2>&1; then
				echo "pypkgs: $label can't import gunicorn from $gdir" >&2
				missing+=("$label:gunicorn")
				gok=0
			fi
		done <"$MANIFEST"
		[ $gok = 1 ] && echo "$GUNICORN_PIN" >"$gdir/.ok"
	else
		rm -rf "$gdir.tmp"
		missing+=(gunicorn)
	fi
fi

if [ ${#missing[@]} -gt 0 ]; then
	echo "pypkgs: missing for: ${missing[*]}" >&2
	[ $require_all = 1 ] && exit 1
fi
echo "$CACHE/pypkgs"
