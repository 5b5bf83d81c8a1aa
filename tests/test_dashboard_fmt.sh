#!/usr/bin/env bash
# tests/test_dashboard_fmt.sh: the dashboard header's loss scale reads as it
# is (issue 30 item 14: 2^19 read "524290"). usage: test_dashboard_fmt.sh
# MIXPREC_BINARY SOURCE_DIR. Evaluates the header's expression from
# dashboard.js under Node; skipped (exit 77) without node.
set -u
js="$2/src/obs/web/dashboard.js"
command -v node > /dev/null || { echo "test_dashboard_fmt: no node: skipped"; exit 77; }
node - "$js" <<'JS'
const src = require("fs").readFileSync(process.argv[2], "utf8");
function grab(name) {  // a top-level function's text, up to its closing brace at column 0
  const at = src.indexOf("function " + name + "(");
  if (at < 0) throw new Error("no function " + name + " in dashboard.js");
  return src.slice(at, src.indexOf("\n}\n", at) + 2);
}
// the header's own expression: $("scale").textContent = EXPR;
const m = src.match(/\$\("scale"\)\.textContent = ([^;]+);/);
if (!m) throw new Error("dashboard.js sets no $(\"scale\") text");
const helpers = grab("fmt") + (src.includes("function fmtScale(") ? grab("fmtScale") : "");
const fmtScale = new Function("v", helpers + "var st = {loss_scale: v}; return " + m[1] + ";");
const want = [[524288, "524288 (2^19)"], [65536, "65536 (2^16)"], [1, "1 (2^0)"],
              [0.5, "0.5 (2^-1)"], [2 ** 24, "16777216 (2^24)"], [3, "3"],
              [49152, "49152"], [null, "-"]];
let bad = 0;
for (const [v, w] of want) {
  const got = fmtScale(v);
  if (got !== w) { console.log("FAIL: fmtScale(" + v + ") = " + got + ", expected " + w); bad++; }
}
if (bad) process.exit(1);
console.log("test_dashboard_fmt: ok");
JS
