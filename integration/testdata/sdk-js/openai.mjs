// The openai npm SDK, unmodified, against idemguard's OpenAI door. Run by
// integration/sdk_test.go with BASE_URL, API_KEY and PROMPT; prints one
// JSON object of what it saw, which the Go test judges.
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY });
const params = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: process.env.PROMPT }] };
const key = (k) => ({ headers: { 'Idempotency-Key': k } });
const out = {};

// The same call twice, then a third read as raw bytes.
const first = await client.chat.completions.create(params, key('ts-plain-1')).withResponse();
const second = await client.chat.completions.create(params, key('ts-plain-1')).withResponse();
const third = await client.chat.completions.create(params, key('ts-plain-1')).asResponse();
out.plain = {
  first: first.data,
  second: second.data,
  firstReplayed: first.response.headers.get('idempotent-replayed'),
  secondReplayed: second.response.headers.get('idempotent-replayed'),
  raw: await third.text(),
};

// A different body under the same key.
try {
  await client.chat.completions.create({ ...params, messages: [{ role: 'user', content: 'another question' }] }, key('ts-plain-1'));
  out.mismatch = { thrown: false };
} catch (e) {
  out.mismatch = { thrown: true, unprocessable: e instanceof OpenAI.UnprocessableEntityError, status: e.status, message: e.message };
}

// A stream read with the SDK's reader, then replayed.
async function streamText(k) {
  const stream = await client.chat.completions.create({ ...params, stream: true }, key(k));
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  return text;
}
out.stream = [await streamText('ts-stream-1'), await streamText('ts-stream-1')];

// Two calls of one key at once.
const concurrent = { ...params, messages: [{ role: 'user', content: process.env.PROMPT + ' (concurrent)' }] };
const both = await Promise.all([0, 1].map(() => client.chat.completions.create(concurrent, key('ts-concurrent-1'))));
out.concurrent = both;

console.log(JSON.stringify(out));
