#!/usr/bin/env bash
# MCP servers nobody on this project wrote, for the tests of `idem proxy`
# (crates/idem-cli/tests/proxy/): the reference servers' npm packages
# @modelcontextprotocol/server-memory, server-filesystem and
# server-everything, installed with npm into target/mcp-servers. Pinned;
# when all three are there at these versions, this does nothing. They run
# on the distribution's Node (20 or later).
#
#   target/mcp-servers/node_modules/@modelcontextprotocol/server-*/dist/index.js
#
# Needs only npm and the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."

# The latest release of each (npm `latest`), published together.
VERSION=2026.8.31
PACKAGES=(server-memory server-filesystem server-everything)

dir=target/mcp-servers
modules=$dir/node_modules/@modelcontextprotocol

installed() {
  node -p "require(process.argv[1]).version" "$PWD/$modules/$1/package.json" 2>/dev/null || true
}

missing=()
for package in "${PACKAGES[@]}"; do
  if [ "$(installed "$package")" != "$VERSION" ] || [ ! -f "$modules/$package/dist/index.js" ]; then
    missing+=("@modelcontextprotocol/$package@$VERSION")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "== MCP servers memory, filesystem, everything $VERSION: in $dir"
  exit 0
fi

echo "== installing ${missing[*]} into $dir"
mkdir -p "$dir"
# A package.json of its own, so that npm installs here and not in a project
# above.
[ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
# A cache of its own, removed after: the tarballs are not kept twice.
npm install --prefix "$dir" --cache "$dir/.npm-cache" --save-exact \
  --no-audit --no-fund --loglevel=error "${missing[@]}"
rm -rf "$dir/.npm-cache"
