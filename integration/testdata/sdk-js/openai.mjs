// The openai npm SDK, unmodified, against idemguard's OpenAI door. Run by
// integration/sdkjs_test.go with BASE_URL, API_KEY and PROMPT; sdkrun.mjs
// makes the calls and prints what it saw.
import OpenAI from 'openai';
import { run } from './sdkrun.mjs';

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY });
await run({
  create: (body, opts) => client.chat.completions.create(body, opts),
  params: { model: 'gpt-4o-mini', messages: [{ role: 'user', content: process.env.PROMPT }] },
  UnprocessableEntityError: OpenAI.UnprocessableEntityError,
  deltaText: (chunk) => chunk.choices[0]?.delta?.content ?? '',
});
