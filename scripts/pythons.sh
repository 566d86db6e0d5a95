#!/usr/bin/env bash
# Provide the CPython interpreters the pyobs test suite runs targets on, and
# write a manifest of them.
#
# Usage: scripts/pythons.sh [--require-all]
#
#   --require-all  exit non-zero (listing what is missing) unless every
#                  interpreter below was provided.
#
# Environment:
#   PYOBS_PYTHONS_CACHE  cache dir (default /var/cache/pyobs-pythons)
#   PYENV_ROOT           pyenv root (default: `pyenv root`, else ~/.pyenv)
#
# Interpreters (label: source):
#   pyenv-3.10 .. pyenv-3.13  newest $(pyenv root)/versions/3.X.N
#   debian-3.11               /usr/bin/python3.11 (apt-installed if root)
#   sid-3.14, sid-3.15        Debian sid packages unpacked with `dpkg -x` into
#                             $CACHE/sid-3.X/root (one root per version, so a
#                             broken download of one cannot spoil the other),
#                             run through that root's own dynamic loader since
#                             their glibc is newer than the host's.
#   ft-3.14t (ft-3.13t)       free-threaded CPython built from Debian sid's
#                             python3.X SOURCE package (upstream tarball,
#                             `apt-get source --download-only` through the
#                             same private apt with a deb-src line) with
#                             ./configure --disable-gil (no PGO/LTO, static
#                             libpython), make -j$(nproc), make altinstall into
#                             $CACHE/ft-3.Xt/root; the sources are deleted
#                             after. Once per machine (minutes, see README).
#                             --require-all wants at least one of them:
#                             ft-3.14t where the mirror serves python3.14's
#                             source, else ft-3.13t (a mirror holding a
#                             snapshot may serve one and not the other).
#                             Needs gcc, make, xz and libffi/zlib headers.
#
# Manifest: $CACHE/interpreters.tsv, one line per interpreter that works:
#   label<TAB>X.Y.Z<TAB>argv words joined by single spaces
# No environment variables are needed: the sid interpreters find their prefix
# from argv[0] (ROOT/usr/bin/python3.X -> ROOT/usr/lib/python3.X).
#
# Caveat for the sid ones: /proc/PID/exe is ROOT/.../ld-linux-x86-64.so.2
# (the python binary shows up only in /proc/PID/maps), and a child started
# with sys.executable runs without the private loader and fails on the host's
# older glibc.
#
# Stdout: the manifest path, last line. Progress goes to stderr.
# Idempotent: interpreters already in the cache are verified by running them
# and not downloaded again.
set -euo pipefail

CACHE=${PYOBS_PYTHONS_CACHE:-/var/cache/pyobs-pythons}
MANIFEST=$CACHE/interpreters.tsv
PYENV_MINORS=(3.10 3.11 3.12 3.13)
SID_MINORS=(3.14 3.15)
FT_MINORS=(3.14 3.13) # free-threaded builds from source; --require-all: one of them
# The Debian mirror is the one the machine's own apt sources name (no host
# name is written here): the first URI serving the "debian" archive.
sid_mirror() {
	local uri
	uri=$(apt-get indextargets --format '$(REPO_URI)' 2>/dev/null |
		grep -v -e security -e updates | sed 's:/*$::' | grep -m1 '/debian$') ||
		uri=$(grep -hoE '^(deb|URIs:)[^#]*https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null |
			grep -oE 'https?://[^ ]+' | grep -v security | sed 's:/*$::' | head -n1)
	printf '%s\n' "$uri"
}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# The probe imports what test targets use, so a half-unpacked stdlib fails.
PROBE='import sys, threading, asyncio, json, time; print("%d.%d.%d" % sys.version_info[:3])'

require_all=0
for arg in "$@"; do
	case $arg in
	--require-all) require_all=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
		exit 0
		;;
	*)
		echo "pythons.sh: unknown argument: $arg (try --help)" >&2
		exit 2
		;;
	esac
done

log() { printf 'pythons.sh: %s\n' "$*" >&2; }

rows=()    # manifest lines
missing=() # labels we could not provide

# probe MINOR ARGV...: print X.Y.Z if ARGV runs as Python MINOR with its stdlib.
probe() {
	local minor=$1 out
	shift
	[[ -e $1 ]] || return 1
	out=$(timeout 60 "$@" -c "$PROBE" 2>/dev/null) || return 1
	[[ $out =~ ^${minor//./\\.}\.[0-9]+$ ]] || return 1
	printf '%s\n' "$out"
}

# add LABEL MINOR ARGV...: record ARGV in the manifest if it probes fine.
add() {
	local label=$1 minor=$2 version
	shift 2
	if version=$(probe "$minor" "$@"); then
		rows+=("$label"$'\t'"$version"$'\t'"$*")
		log "$label: $version: $*"
		return 0
	fi
	return 1
}

if ! mkdir -p "$CACHE" 2>/dev/null || [[ ! -w $CACHE ]]; then
	log "cannot write cache dir $CACHE (run as root or set PYOBS_PYTHONS_CACHE)"
	exit 1
fi
# Serialise concurrent runs (e.g. parallel test jobs) on the same cache.
if command -v flock >/dev/null; then
	exec 9>"$CACHE/.lock"
	flock 9
fi

# --- pyenv ---------------------------------------------------------------
pyenv_root=${PYENV_ROOT:-}
if [[ -z $pyenv_root ]]; then
	if command -v pyenv >/dev/null; then
		pyenv_root=$(pyenv root)
	elif [[ -x $HOME/.pyenv/bin/pyenv || -d $HOME/.pyenv/versions ]]; then
		pyenv_root=$HOME/.pyenv
	fi
fi
if [[ -z $pyenv_root || ! -d $pyenv_root/versions ]]; then
	log "pyenv not found (no ${pyenv_root:-~/.pyenv}/versions); skipping pyenv-${PYENV_MINORS[*]}"
	for minor in "${PYENV_MINORS[@]}"; do missing+=("pyenv-$minor"); done
else
	for minor in "${PYENV_MINORS[@]}"; do
		found=0
		# Newest first; only plain X.Y.N builds (not 3.13.0t, rc, -dev).
		while read -r ver; do
			if add "pyenv-$minor" "$minor" "$pyenv_root/versions/$ver/bin/python$minor"; then
				found=1
				break
			fi
			log "pyenv-$minor: $ver does not run; trying older"
		done < <(find "$pyenv_root/versions" -mindepth 1 -maxdepth 1 -printf '%f\n' |
			grep -E "^${minor//./\\.}\.[0-9]+$" | sort -rV)
		if ((!found)); then
			log "pyenv-$minor: no working $pyenv_root/versions/$minor.* (try: pyenv install $minor)"
			missing+=("pyenv-$minor")
		fi
	done
fi

# --- Debian's own 3.11 ---------------------------------------------------
if [[ ! -x /usr/bin/python3.11 && $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
	log "debian-3.11: /usr/bin/python3.11 absent; trying apt-get install"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		python3.11-minimal libpython3.11-stdlib >&2 ||
		log "debian-3.11: apt-get install failed (maybe run apt-get update first)"
fi
if ! add debian-3.11 3.11 /usr/bin/python3.11; then
	log "debian-3.11: /usr/bin/python3.11 missing or broken"
	missing+=(debian-3.11)
fi

# --- Debian sid 3.14 / 3.15 ------------------------------------------------
case $(dpkg --print-architecture 2>/dev/null || uname -m) in
amd64 | x86_64) triplet=x86_64-linux-gnu ldso=ld-linux-x86-64.so.2 ;;
arm64 | aarch64) triplet=aarch64-linux-gnu ldso=ld-linux-aarch64.so.1 ;;
*) triplet='' ldso='' ;;
esac
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)

sid_argv() { # ROOT MINOR
	local lib=$1/usr/lib/$triplet
	printf '%s\n' "$lib/$ldso" --library-path "$lib" "$1/usr/bin/python$2"
}

APT=$CACHE/apt
apt_ready=0 # 1: index fetched, 2: fetching failed
# A private apt: own sources, lists, cache and (empty) dpkg status. APT_CONFIG
# is read before apt.conf.d, so pointing Dir::Etc::Parts at an empty dir keeps
# the host's hooks (appstream, docker-clean, ...) out of it.
sid_apt_setup() {
	((apt_ready == 1)) && return 0
	((apt_ready == 2)) && return 1
	local proxy signed out
	mkdir -p "$APT/empty" "$APT/lists/partial" "$APT/cache" "$APT/state" "$APT/log"
	: >"$APT/status"
	{
		echo "Dir::Etc::Main \"/dev/null\";"
		echo "Dir::Etc::Parts \"$APT/empty\";"
		echo "Dir::Etc::SourceList \"$APT/sources.list\";"
		echo "Dir::Etc::SourceParts \"$APT/empty\";"
		echo "Dir::Etc::Preferences \"/dev/null\";"
		echo "Dir::Etc::PreferencesParts \"$APT/empty\";"
		echo "Dir::State \"$APT/state\";"
		echo "Dir::State::Lists \"$APT/lists\";"
		echo "Dir::State::status \"$APT/status\";"
		echo "Dir::Cache \"$APT/cache\";"
		echo "Dir::Log \"$APT/log\";"
		echo "APT::Architecture \"$arch\";"
		echo "APT::Architectures { \"$arch\"; };"
		echo "Acquire::Languages \"none\";"
		# Keep the index compressed and skip the .bin caches: ~10 MB, not 160.
		echo "Acquire::GzipIndexes \"true\";"
		echo "Dir::Cache::pkgcache \"\";"
		echo "Dir::Cache::srcpkgcache \"\";"
		echo "Acquire::Retries \"3\";"
		# Mirrors may serve a frozen snapshot whose Valid-Until has passed.
		echo "Acquire::Check-Valid-Until \"false\";"
		echo "Acquire::Check-Date \"false\";"
		# Keep a host-configured proxy, the one setting we want from the host.
		for proto in http https; do
			proxy=$(apt-config dump "Acquire::$proto::Proxy" 2>/dev/null |
				sed -n "s/^Acquire::$proto::Proxy \"\(.*\)\";$/\1/p")
			if [[ -n $proxy ]]; then echo "Acquire::$proto::Proxy \"$proxy\";"; fi
		done
	} >"$APT/apt.conf"
	export APT_CONFIG=$APT/apt.conf

	# Prefer a verified index; fall back to trusted=yes only when the host's
	# keyring is missing or cannot verify sid (e.g. too old for a new key).
	local mirror
	mirror=$(sid_mirror)
	if [[ -z $mirror ]]; then
		log "sid: no Debian mirror found in the machine's apt sources"
		apt_ready=2
		return 1
	fi
	for signed in "signed-by=$KEYRING" trusted=yes; do
		[[ $signed == signed-by=* && ! -r $KEYRING ]] && continue
		printf 'deb [%s] %s sid main\ndeb-src [%s] %s sid main\n' "$signed" "$mirror" "$signed" "$mirror" >"$APT/sources.list"
		log "sid: apt-get update ($signed)"
		rm -f "$APT"/lists/*_Packages* "$APT"/lists/*_Sources* "$APT"/lists/*Release*
		out=$(apt-get update -qq 2>&1) || true
		[[ -n $out ]] && printf '%s\n' "$out" >&2
		if compgen -G "$APT/lists/*_sid_main_binary-${arch}_Packages*" >/dev/null; then
			apt_ready=1
			return 0
		fi
		log "sid: apt-get update with [$signed] failed"
		grep -qE 'NO_PUBKEY|EXPKEYSIG|KEYEXPIRED|not signed|signature' <<<"$out" || break
	done
	apt_ready=2 # do not retry for the next version
	return 1
}

# sid_fetch MINOR ROOT: download python3.X's closure and unpack it into ROOT.
sid_fetch() {
	local minor=$1 root=$2 dir=$CACHE/sid-$1 deb
	sid_apt_setup || return 1
	# A fresh archives dir per version, so only this closure gets unpacked.
	rm -rf "$dir/debs" "$root.tmp"
	mkdir -p "$dir/debs/partial" "$root.tmp" || return 1
	# Empty dpkg status: apt fetches the whole dependency closure (libc6 too).
	log "sid-$minor: downloading python$minor-minimal and its dependencies"
	apt-get install -d -y -qq --no-install-recommends \
		-o Dir::Cache::Archives="$dir/debs/" \
		"python$minor-minimal" "libpython$minor-stdlib" >&2 || return 1
	for deb in "$dir"/debs/*.deb; do
		dpkg -x "$deb" "$root.tmp" || return 1
	done
	rm -rf "$root"
	mv "$root.tmp" "$root" || return 1
	rm -rf "$dir/debs" # 20+ MB we no longer need; a refetch starts clean
}

for minor in "${SID_MINORS[@]}"; do
	label=sid-$minor
	if [[ -z $triplet ]]; then
		log "$label: unsupported architecture; skipping"
		missing+=("$label")
		continue
	fi
	root=$CACHE/$label/root
	mapfile -t argv < <(sid_argv "$root" "$minor")
	if add "$label" "$minor" "${argv[@]}"; then
		continue
	fi
	if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
		log "$label: needs apt-get and dpkg; skipping"
	elif ! sid_fetch "$minor" "$root"; then
		log "$label: download or unpack failed; skipping"
	elif ! add "$label" "$minor" "${argv[@]}"; then
		log "$label: unpacked into $root but it does not run: ${argv[*]}"
	else
		continue
	fi
	missing+=("$label")
done

# --- sid's C headers (libpython3.X-dev), for the tests' C extensions --------
# Not part of the interpreter's run: unpacked into its root, where its
# sysconfig looks (prefix/include/python3.X, the arch's pyconfig.h under
# include/<triplet>); a failure is said, and the tests that need the
# headers say what is missing.
for minor in "${SID_MINORS[@]}"; do
	root=$CACHE/sid-$minor/root
	[[ -d $root && ! -r $root/usr/include/python$minor/Python.h ]] || continue
	if ! sid_apt_setup; then
		log "sid-$minor: headers not fetched (no sid index)"
		continue
	fi
	tmp=$(mktemp -d)
	if (cd "$tmp" && apt-get download -qq "libpython$minor-dev" >&2) && dpkg -x "$tmp"/libpython"$minor"-dev_*.deb "$root"; then
		log "sid-$minor: headers unpacked into $root/usr/include"
	else
		log "sid-$minor: libpython$minor-dev download or unpack failed: no headers"
	fi
	rm -rf "$tmp"
done

# --- free-threaded 3.14t / 3.13t, built from Debian's source package ---------
# ft_build MINOR DIR: fetch python3.X's upstream tarball from sid's source
# package (newest version the mirror serves first) and build it into DIR/root.
ft_build() {
	local minor=$1 dir=$2 ver got='' orig start jobs
	sid_apt_setup || return 1
	command -v make >/dev/null && command -v cc >/dev/null || {
		log "ft-${minor}t: needs cc and make"
		return 1
	}
	rm -rf "$dir/src" "$dir/dl" "$dir/root"
	mkdir -p "$dir/dl" || return 1
	# Versions the index lists, newest first; a mirror may lack the newest.
	while read -r ver; do
		if (cd "$dir/dl" && apt-get source -qq --download-only "python$minor=$ver" >&2); then
			got=$ver
			break
		fi
		log "ft-${minor}t: source python$minor=$ver not served; trying older"
		rm -f "$dir"/dl/*
	done < <(apt-cache showsrc "python$minor" 2>/dev/null | sed -n 's/^Version: //p' | sort -rV | uniq)
	if [[ -z $got ]]; then
		log "ft-${minor}t: no python$minor source package served by the mirror"
		return 1
	fi
	orig=$(compgen -G "$dir/dl/python${minor}_*.orig.tar.*" | head -n1)
	[[ -n $orig ]] || return 1
	mkdir -p "$dir/src" && tar -xf "$orig" -C "$dir/src" --strip-components=1 || return 1
	jobs=$(nproc 2>/dev/null || echo 2)
	start=$(date +%s)
	log "ft-${minor}t: building python$minor $got with --disable-gil (make -j$jobs; several minutes)"
	(
		cd "$dir/src" &&
			./configure -q --disable-gil --without-ensurepip --prefix="$dir/root" >"$dir/build.log" 2>&1 &&
			make -j"$jobs" -s >>"$dir/build.log" 2>&1 &&
			make -s altinstall >>"$dir/build.log" 2>&1
	) || {
		log "ft-${minor}t: build failed; see $dir/build.log"
		return 1
	}
	# CPython's own test suite (~200 MB) is not needed to run targets.
	rm -rf "$dir/src" "$dir/dl" "$dir/root/lib/python${minor}t/test"
	log "ft-${minor}t: built in $(($(date +%s) - start)) s; $(du -sh "$dir/root" | cut -f1) installed"
}

# ft_ok PY: PY exists and was built with --disable-gil.
ft_ok() {
	[[ -x $1 ]] && timeout 60 "$1" -c 'import sys, sysconfig; sys.exit(sysconfig.get_config_var("Py_GIL_DISABLED") != 1)' 2>/dev/null
}

ft_missing=()
for minor in "${FT_MINORS[@]}"; do
	label=ft-${minor}t
	dir=$CACHE/$label
	py=$dir/root/bin/python${minor}t
	if ft_ok "$py" && add "$label" "$minor" "$py"; then
		continue
	fi
	if ! command -v apt-get >/dev/null; then
		log "$label: needs apt-get; skipping"
	elif ! ft_build "$minor" "$dir"; then
		log "$label: not built"
	elif ! ft_ok "$py" || ! add "$label" "$minor" "$py"; then
		log "$label: built into $dir/root but it does not run free-threaded: $py"
	else
		continue
	fi
	ft_missing+=("$label")
done
if ((${#ft_missing[@]} == ${#FT_MINORS[@]})); then
	missing+=("$(
		IFS='|'
		echo "${ft_missing[*]}"
	)")
fi

# --- manifest --------------------------------------------------------------
tmp=$(mktemp "$MANIFEST.XXXXXX")
if ((${#rows[@]})); then printf '%s\n' "${rows[@]}" >"$tmp"; fi
chmod 644 "$tmp"
mv "$tmp" "$MANIFEST"
log "wrote ${#rows[@]} interpreter(s) to $MANIFEST"

status=0
if ((${#missing[@]})); then
	log "missing: ${missing[*]}"
	if ((require_all)); then status=1; fi
fi
echo "$MANIFEST"
exit "$status"
