// The calls both SDK scripts make, through one SDK's create: the same call
// twice, then a third read as raw bytes; a different body under the same
// key; a stream read with the SDK's reader, then replayed; two calls of one
// key at once. Prints one JSON object of what it saw, which the Go test
// judges.
const key = (k) => ({ headers: { 'Idempotency-Key': k } });

// run drives create (an SDK's create method, bound) with params; the SDK's
// UnprocessableEntityError is the error class a mismatch must throw, and
// deltaText is the text of one streamed event.
export async function run({ create, params, UnprocessableEntityError, deltaText }) {
  const out = {};
  const first = await create(params, key('ts-plain-1')).withResponse();
  const second = await create(params, key('ts-plain-1')).withResponse();
  const third = await create(params, key('ts-plain-1')).asResponse();
  out.plain = {
    first: first.data,
    second: second.data,
    firstReplayed: first.response.headers.get('idempotent-replayed'),
    secondReplayed: second.response.headers.get('idempotent-replayed'),
    raw: await third.text(),
  };

  try {
    await create({ ...params, messages: [{ role: 'user', content: 'another question' }] }, key('ts-plain-1'));
    out.mismatch = { thrown: false };
  } catch (e) {
    out.mismatch = { thrown: true, unprocessable: e instanceof UnprocessableEntityError, status: e.status, message: e.message };
  }

  async function streamText(k) {
    const stream = await create({ ...params, stream: true }, key(k));
    let text = '';
    for await (const event of stream) text += deltaText(event);
    return text;
  }
  out.stream = [await streamText('ts-stream-1'), await streamText('ts-stream-1')];

  const concurrent = { ...params, messages: [{ role: 'user', content: process.env.PROMPT + ' (concurrent)' }] };
  out.concurrent = await Promise.all([0, 1].map(() => create(concurrent, key('ts-concurrent-1'))));

  console.log(JSON.stringify(out));
}
