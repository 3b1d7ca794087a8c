// export_ort.mjs: the oracle for `ppc export` (not part of `go test`). It exports gpt, llama
// and mlp (testdata/models, preset tiny), the IR models that hold every op the exporter maps
// (testdata/ir/export_ops.ir, gradcheck.ir, gradcheck_nn.ir) and an ONNX model exported back
// (testdata/models/gpt-tiny.onnx) with ppc, runs each exported
// file in onnxruntime (npm onnxruntime-node) on the inputs `ppc infer` drew for the source
// model, and compares every onnxruntime output with `ppc infer` on the exported .onnx and on
// the source model (a .ppm's one output, its loss; an .ir's or .onnx's outputs), within rtol 1e-4
// (numpy's allclose: |a − b| <= atol + rtol·|b|, with atol 1e-6 for values near zero). It
// prints the max abs and max rel differences, and exits 1 when a comparison fails.
//
// Run it from a scratch directory holding onnxruntime-node (the package is resolved from the
// current directory, so the repository needs no node_modules):
//
//   mkdir -p /tmp/ort && cd /tmp/ort && npm init -y && npm install --ignore-scripts onnxruntime-node
//   node /path/to/ppc/testdata/oracle/export_ort.mjs [--ppc /path/to/ppc] [--work DIR] [--opset N]
//
// --opset N exports at that opset (ppc export --opset): 23 writes the fused attention of gpt and
// llama as ONNX's Attention node.
//
// Without --ppc it builds ppc from the repository (go build) into the work directory.
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(path.join(process.cwd(), 'package.json'));
let ort;
try {
  ort = require('onnxruntime-node');
} catch (e) {
  console.error(`cannot load onnxruntime-node from ${process.cwd()} (${e.message});\n` +
    'run this script from a directory where `npm install --ignore-scripts onnxruntime-node` was run');
  process.exit(2);
}

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const work = flag('--work') ?? fs.mkdtempSync(path.join(os.tmpdir(), 'ppc-export-ort-'));
fs.mkdirSync(work, { recursive: true });
let ppc = flag('--ppc');
if (!ppc) {
  ppc = path.join(work, 'ppc');
  execFileSync('go', ['build', '-o', ppc, './cmd/ppc'], { cwd: repo, stdio: 'inherit' });
}
const run = (...a) => execFileSync(ppc, a, { encoding: 'utf8' });

// readNpy reads a little-endian .npy (format 1.0 or 2.0) of f32, f64, i64 or i32.
function readNpy(file) {
  const b = fs.readFileSync(file);
  if (b.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = b[6];
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + hlen;
  const header = b.toString('latin1', major === 1 ? 10 : 12, start);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  if (/True/.test(/'fortran_order':\s*(\w+)/.exec(header)[1])) throw new Error(`${file}: Fortran order`);
  const data = b.buffer.slice(b.byteOffset + start, b.byteOffset + b.length);
  const types = { '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array], '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array] };
  if (!types[descr]) throw new Error(`${file}: dtype ${descr} not handled`);
  const [type, Arr] = types[descr];
  return { type, shape, data: new Arr(data.slice(0)) };
}

// compare returns the max abs difference of got against want, the max rel difference over
// the elements with |want| >= 1e-3 (smaller ones are judged by atol alone), and whether every
// element is within atol + rtol·|want| (numpy's allclose).
function compare(got, want, rtol, atol) {
  if (got.length !== want.length) throw new Error(`length ${got.length} vs ${want.length}`);
  let maxAbs = 0, maxRel = 0, ok = true;
  for (let i = 0; i < got.length; i++) {
    const a = Number(got[i]), b = Number(want[i]);
    const d = Math.abs(a - b);
    maxAbs = Math.max(maxAbs, d);
    if (Math.abs(b) >= 1e-3) maxRel = Math.max(maxRel, d / Math.abs(b));
    if (!(d <= atol + rtol * Math.abs(b))) ok = false;
  }
  return { maxAbs, maxRel, ok };
}

// The models: the three shipped DSL models, IR models holding every op ppc export maps (the
// gradient-check models in f32: onnxruntime's CPU Conv has no f64 kernel), and an .onnx.
const models = [
  { name: 'gpt', src: 'models/gpt.ppm', flags: ['--preset', 'tiny'] },
  { name: 'llama', src: 'models/llama.ppm', flags: ['--preset', 'tiny'] },
  { name: 'mlp', src: 'models/mlp.ppm', flags: ['--preset', 'tiny'] },
  { name: 'export_ops', src: 'ir/export_ops.ir', flags: [] },
  { name: 'gradcheck', src: 'ir/gradcheck.ir', flags: [], f32: true },
  { name: 'gradcheck_nn', src: 'ir/gradcheck_nn.ir', flags: [], f32: true },
  { name: 'gpt-tiny', src: 'models/gpt-tiny.onnx', flags: ['--dim', 'batch=2'] },
];
const rtol = 1e-4, atol = 1e-6;
const seed = '1';
let failed = false;
for (const m of models) {
  let src = path.join(repo, 'testdata', m.src);
  if (m.f32) {
    const f32 = path.join(work, `${m.name}.ir`);
    fs.writeFileSync(f32, fs.readFileSync(src, 'utf8').replaceAll('f64', 'f32'));
    src = f32;
  }
  const onnx = path.join(work, `${m.name}.onnx`);
  const refOut = path.join(work, `${m.name}-source`);
  const onnxOut = path.join(work, `${m.name}-onnx`);
  run('export', src, ...m.flags, '--seed', seed, ...(flag('--opset') ? ['--opset', flag('--opset')] : []), '-o', onnx);
  run('infer', src, ...m.flags, '--seed', seed, '--output-dir', refOut);
  const inputDir = path.join(refOut, 'inputs');
  const inputs = fs.readdirSync(inputDir).filter((f) => f.endsWith('.npy')).map((f) => f.slice(0, -4));
  run('infer', onnx, ...inputs.flatMap((n) => ['--input', `${n}=${path.join(inputDir, n + '.npy')}`]), '--output-dir', onnxOut);

  const session = await ort.InferenceSession.create(onnx);
  const feeds = {};
  for (const n of session.inputNames) {
    const t = readNpy(path.join(inputDir, `${n}.npy`));
    feeds[n] = new ort.Tensor(t.type, t.data, t.shape);
  }
  const res = await session.run(feeds);
  // onnxruntime's every output against ppc infer on the .onnx, and against ppc infer on the
  // source model for the outputs it has (a .ppm's only output is its loss).
  for (const [against, dir] of [['ppc on the export', onnxOut], [`ppc on ${path.basename(m.src)}`, refOut]]) {
    let worst = { maxAbs: 0, maxRel: 0, ok: true }, absAt = '', relAt = '', n = 0;
    for (const out of session.outputNames) {
      const file = path.join(dir, `${out}.npy`);
      if (!fs.existsSync(file)) continue;
      const c = compare(res[out].data, readNpy(file).data, rtol, atol);
      n++;
      if (!c.ok) console.log(`${m.name}: output ${out}: onnxruntime and ${against} differ beyond rtol ${rtol}, atol ${atol}`);
      worst.ok &&= c.ok;
      if (c.maxAbs >= worst.maxAbs) [worst.maxAbs, absAt] = [c.maxAbs, out];
      if (c.maxRel >= worst.maxRel) [worst.maxRel, relAt] = [c.maxRel, out];
    }
    failed ||= !worst.ok || n === 0;
    console.log(`${m.name.padEnd(12)} onnxruntime vs ${against.padEnd(22)} ${String(n).padStart(2)} output(s): max abs ${worst.maxAbs.toExponential(2)} (${absAt}), ` +
      `max rel ${worst.maxRel.toExponential(2)} (${relAt})  ${worst.ok && n > 0 ? 'ok' : 'FAIL'}`);
  }
  if (res.loss) console.log(`${''.padEnd(12)} loss: onnxruntime ${Number(res.loss.data[0]).toFixed(6)}`);
}
console.log(`onnxruntime-node ${require('onnxruntime-node/package.json').version}, rtol ${rtol}, atol ${atol}; work directory ${work}`);
process.exit(failed ? 1 : 0);
