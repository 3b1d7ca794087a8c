// onnxruntime-node's side of bench/cpu.sh: node ort.js MODEL.onnx THREADS REPS
// Runs MODEL (one input named "input", [1, 3, 224, 224] float32) twice to warm up, then REPS
// times, and prints the median and the fastest latency: median <ms> min <ms>
//
// With REPS "serve" it warms up, prints "ready", and then runs once for every line it reads
// on stdin, printing that run's latency in ms: runtime's BenchmarkCNNAgainstOnnxruntime
// steps it in turn with ppc, a step each.
const ort = require('onnxruntime-node');
const readline = require('readline');

(async () => {
  const [model, threads, reps] = [process.argv[2], +process.argv[3], process.argv[4]];
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
    // onnxruntime's default: its pool's threads spin between operators (allow_spinning 1),
    // which measured 5–10% faster than sleeping here, as ppc's kernels' helpers spin.
    graphOptimizationLevel: 'all',
  });
  const x = new ort.Tensor('float32', Float32Array.from({length: 3 * 224 * 224}, () => Math.random()), [1, 3, 224, 224]);
  for (let i = 0; i < 2; i++) await session.run({input: x});
  if (reps === 'serve') {
    console.log('ready');
    for await (const _ of readline.createInterface({input: process.stdin})) {
      const t0 = process.hrtime.bigint();
      await session.run({input: x});
      console.log((Number(process.hrtime.bigint() - t0) / 1e6).toFixed(3));
    }
    return;
  }
  const t = [];
  for (let i = 0; i < +reps; i++) {
    const t0 = process.hrtime.bigint();
    await session.run({input: x});
    t.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  t.sort((a, b) => a - b);
  console.log('median ' + t[t.length >> 1].toFixed(3) + ' min ' + t[0].toFixed(3));
})();
