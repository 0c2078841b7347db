#!/bin/sh
# Stages what `docker build -f deploy/Dockerfile --target prebuilt .` copies into the
# image: the compiled gateway, the shipped policies and the production dependencies
# only (npm ci --omit=dev, from npm's cache when the registry is unreachable).
set -eu
cd "$(dirname "$0")/.."
[ "${PORTCULLIS_PREBUILT_SKIP_BUILD:-}" = 1 ] || npm run build >/dev/null
rm -rf .prebuilt
mkdir -p .prebuilt/dist
cp -r dist/src .prebuilt/dist/src
cp -r policies package.json package-lock.json .prebuilt/
(cd .prebuilt && { npm ci --omit=dev --ignore-scripts --no-audit --no-fund --offline >/dev/null 2>&1 || npm ci --omit=dev --ignore-scripts --no-audit --no-fund >/dev/null; })
echo ".prebuilt: $(du -sh .prebuilt | cut -f1)"
