// Runs an ONNX model in ONNX Runtime (onnxruntime-node) on a raw float32 batch and writes its
// first output as raw float32, for the int8 conversion certificate against ORT
// (scripts/bench-int8-ort.py).
// Usage: NODE_PATH=build/ort/node_modules node ort_run_batch.js MODEL.onnx INPUT.bin
//        SHAPE(256,1,28,28) OUTPUT.bin
// Prints onnxruntime-node's version and the output's shape; exit 2 when it could not run.
const fs = require('fs');
(async () => {
  const ort = require('onnxruntime-node');
  const [model, inputFile, shapeText, outputFile] = process.argv.slice(2);
  const bytes = fs.readFileSync(inputFile);
  const floats = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  const session = await ort.InferenceSession.create(model);
  const input = new ort.Tensor('float32', floats, shapeText.split(',').map(Number));
  const result = await session.run({ [session.inputNames[0]]: input });
  const output = result[session.outputNames[0]];
  fs.writeFileSync(outputFile, Buffer.from(output.data.buffer, output.data.byteOffset,
                                           output.data.length * 4));
  const version = require('onnxruntime-node/package.json').version;
  console.log(`onnxruntime-node ${version}: output ${output.dims.join('x')}`);
})().catch((e) => { console.log(`ORT could not run the model: ${e.message}`); process.exit(2); });
