#!/usr/bin/env node
// Reference token ids from Hugging Face's tokenizers library (the Rust
// implementation, npm package 'tokenizers'; install it outside the repo,
// e.g. `npm install --prefix /tmp/tokref tokenizers@0.23.2`, and run with
// NODE_PATH=/tmp/tokref/node_modules). Used only to generate fixtures.
//
//   tokenizer_hf_ids.js TOKENIZER.json CASES.json FORMAT OUT.json
//
// CASES.json is written by tools/make_llama_tokenizers.py: [{name, hex,
// special, add_special, formats}]. For every case of FORMAT whose bytes are
// valid UTF-8 it writes {name, ids, decoded_hex}. special false means
// special tokens are ordinary text: those cases use a copy of the
// tokenizer whose special added tokens have contents no text contains.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [tjPath, casesPath, format, outPath] = process.argv.slice(2);
  const tj = JSON.parse(fs.readFileSync(tjPath, 'utf8'));
  const full = Tokenizer.fromString(JSON.stringify(tj));
  const plainJson = JSON.parse(JSON.stringify(tj));
  // Same ids, but no text can match a special token any more.
  for (const a of plainJson.added_tokens || []) {
    if (a.special) a.content = '\uE000kvlm-disabled-' + a.id;
  }
  const plain = Tokenizer.fromString(JSON.stringify(plainJson));
  const cases = JSON.parse(fs.readFileSync(casesPath, 'utf8'));
  const out = [];
  const dec = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  for (const c of cases) {
    if (c.formats && !c.formats.includes(format)) continue;
    let text;
    try {
      text = dec.decode(Buffer.from(c.hex, 'hex'));
    } catch (e) {
      continue;   // not valid UTF-8: the library cannot take it
    }
    const tok = c.special ? full : plain;
    const enc = await tok.encode(text, null, { addSpecialTokens: !!c.add_special });
    const ids = Array.from(enc.getIds());
    const decoded = await full.decode(ids, false);
    out.push({ name: c.name, ids, decoded_hex: Buffer.from(decoded, 'utf8').toString('hex') });
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
  console.log(`${format}: ${out.length} cases`);
}

main().catch((e) => { console.error(e); process.exit(1); });
