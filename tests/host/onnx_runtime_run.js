// Runs an ONNX model in ONNX Runtime (onnxruntime-node) on a raw float32 input and compares its
// first output with a raw float32 reference.
// Usage: node onnx_runtime_run.js MODEL.onnx INPUT.bin SHAPE(1,3,32,32) EXPECTED.bin ABS REL
//        [OPTIMIZATION: disabled|basic|extended|all, default all]
// Exit 0: within |ort - ref| <= ABS + REL·|ref| everywhere; 1: outside; 2: could not run.
const fs = require('fs');
(async () => {
  const ort = require('onnxruntime-node');
  const [model, inputFile, shapeText, expectedFile, abs, rel, level] = process.argv.slice(2);
  const floats = (file) => {
    const bytes = fs.readFileSync(file);
    return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  };
  const session = await ort.InferenceSession.create(model, {graphOptimizationLevel: level || 'all'});
  const input = new ort.Tensor('float32', floats(inputFile), shapeText.split(',').map(Number));
  const result = await session.run({ [session.inputNames[0]]: input });
  const actual = result[session.outputNames[0]].data;
  const expected = floats(expectedFile);
  if (actual.length !== expected.length) {
    console.log(`ORT gives ${actual.length} values, the reference ${expected.length}`);
    process.exit(1);
  }
  let worst = 0;
  let bad = 0;
  for (let i = 0; i < actual.length; i++) {
    const d = Math.abs(actual[i] - expected[i]);
    worst = Math.max(worst, d);
    if (!(d <= Number(abs) + Number(rel) * Math.abs(expected[i]))) bad++;
  }
  const version = require('onnxruntime-node/package.json').version;
  console.log(`onnxruntime-node ${version}: ${actual.length} values, max |ort - lithe| ${worst}, ${bad} outside`);
  process.exit(bad === 0 ? 0 : 1);
})().catch((e) => { console.log(`ORT could not run the model: ${e.message}`); process.exit(2); });
