// The @anthropic-ai/sdk npm SDK, unmodified, against idemguard's Anthropic
// door. Run by integration/sdkjs_test.go with BASE_URL, API_KEY and
// PROMPT; sdkrun.mjs makes the calls and prints what it saw.
import Anthropic from '@anthropic-ai/sdk';
import { run } from './sdkrun.mjs';

const client = new Anthropic({ baseURL: process.env.BASE_URL, apiKey: process.env.API_KEY });
await run({
  create: (body, opts) => client.messages.create(body, opts),
  params: { model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: process.env.PROMPT }] },
  UnprocessableEntityError: Anthropic.UnprocessableEntityError,
  deltaText: (event) => (event.type === 'content_block_delta' && event.delta.type === 'text_delta' ? event.delta.text : ''),
});
