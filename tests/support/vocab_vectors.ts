/**
 * Reads llama.cpp's tokenizer test vectors (`models/ggml-vocab-*.gguf.inp` / `.out`): inputs are
 * separated by `\n__ggml_vocab_test__\n`, outputs are one line of space-separated ids per input.
 *
 * @example
 * ```ts
 * import { readVocabVectors } from "./vocab_vectors.ts";
 * const cases = await readVocabVectors("models/ggml-vocab-llama-bpe.gguf");
 * ```
 * @module
 */

export type VocabCase = { input: string; expected: number[] };

export async function readVocabVectors(vocabPath: string): Promise<VocabCase[]> {
  const raw = await Deno.readTextFile(`${vocabPath}.inp`);
  const out = (await Deno.readTextFile(`${vocabPath}.out`)).split("\n");
  const sep = "\n__ggml_vocab_test__\n";
  const inputs: string[] = [];
  let pos = 0;
  while (pos < raw.length) {
    const next = raw.indexOf(sep, pos);
    if (next < 0) {
      inputs.push(raw.slice(pos));
      break;
    }
    inputs.push(raw.slice(pos, next));
    pos = next + sep.length;
  }
  return inputs.map((input, i) => ({
    input,
    expected: (out[i] ?? "").trim().split(" ").filter((s) => s.length).map(Number),
  }));
}

/** Vocab files of the source tree that come with vectors. */
export async function vocabFilesWithVectors(srcDir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(`${srcDir}/models`)) {
    if (/^ggml-vocab-.*\.gguf$/.test(e.name)) {
      try {
        await Deno.stat(`${srcDir}/models/${e.name}.inp`);
        await Deno.stat(`${srcDir}/models/${e.name}.out`);
        names.push(`${srcDir}/models/${e.name}`);
      } catch {
        // no vectors for this vocab
      }
    }
  }
  return names.sort();
}
