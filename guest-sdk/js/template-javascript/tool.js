// The {{tool}} tool. Build with ./build.sh, then:
//   toolhost call --config toolhost.toml {{tool}} '{"name":"Ada"}'
//
// The SDK in sdk/js is TypeScript: the build bundles it in, and editors
// read its types to complete this file.

import { defineTool, s, toolbox } from './sdk/js/toolhost';

const hello = defineTool({
  name: '{{tool}}',
  description: 'Greet someone by name.',
  // The arguments: their JSON Schema for the model, the shape of `args`
  // in `run`, and the check they pass before `run` is called.
  input: {
    name: s.string().describe('Who to greet.'),
  },
  readOnly: true,
  idempotent: true,
  run({ name }) {
    return `Hello, ${name}!`;
  },
});

// The component's `tool` interface: list every tool of this component here.
export const tool = toolbox(hello);
