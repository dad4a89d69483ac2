// The @anthropic-ai/sdk npm SDK, unmodified, against idemguard's Anthropic
// door. Run by integration/sdkjs_test.go with BASE_URL, API_KEY and
// PROMPT; prints one JSON object of what it saw, which the Go test judges.
import Anthropic from '@anthropic-ai/sdk';

const client = new Anthropic({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY });
const params = { model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: process.env.PROMPT }] };
const key = (k) => ({ headers: { 'Idempotency-Key': k } });
const out = {};

const first = await client.messages.create(params, key('ts-plain-1')).withResponse();
const second = await client.messages.create(params, key('ts-plain-1')).withResponse();
const third = await client.messages.create(params, key('ts-plain-1')).asResponse();
out.plain = {
  first: first.data,
  second: second.data,
  firstReplayed: first.response.headers.get('idempotent-replayed'),
  secondReplayed: second.response.headers.get('idempotent-replayed'),
  raw: await third.text(),
};

try {
  await client.messages.create({ ...params, messages: [{ role: 'user', content: 'another question' }] }, key('ts-plain-1'));
  out.mismatch = { thrown: false };
} catch (e) {
  out.mismatch = { thrown: true, unprocessable: e instanceof Anthropic.UnprocessableEntityError, status: e.status, message: e.message };
}

async function streamText(k) {
  const stream = await client.messages.create({ ...params, stream: true }, key(k));
  let text = '';
  for await (const event of stream) {
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
  }
  return text;
}
out.stream = [await streamText('ts-stream-1'), await streamText('ts-stream-1')];

const concurrent = { ...params, messages: [{ role: 'user', content: process.env.PROMPT + ' (concurrent)' }] };
out.concurrent = await Promise.all([0, 1].map(() => client.messages.create(concurrent, key('ts-concurrent-1'))));

console.log(JSON.stringify(out));
