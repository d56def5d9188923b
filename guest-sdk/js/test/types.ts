// Compile-time tests of the types the schema builder gives `run`: checked by
// `npm run check` (tsc), never run. Each `@ts-expect-error` fails the check
// if the line below it stops being an error.

import { Output, defineTool, s, toolbox, type Infer } from '../toolhost';

/** `true` only when `A` and `B` are the same type. */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function assertType<T extends true>(): T | undefined {
  return undefined;
}

const trip = s.object({
  city: s.string(),
  days: s.integer().optional(),
  units: s.enum(['metric', 'imperial']),
  stops: s.array(s.object({ name: s.string(), nights: s.number().optional() })).optional(),
  express: s.boolean().describe('Skip the scenic route.'),
  note: s.string().nullable(),
});
assertType<
  Equal<
    Infer<typeof trip>,
    {
      city: string;
      days?: number;
      units: 'metric' | 'imperial';
      stops?: { name: string; nights?: number }[];
      express: boolean;
      note: string | null;
    }
  >
>();

const plan = defineTool({
  name: 'plan',
  description: 'Plan a trip.',
  input: { city: s.string(), days: s.integer().optional() },
  output: { summary: s.string() },
  run(args, ctx) {
    assertType<Equal<typeof args, { city: string; days?: number }>>();
    assertType<Equal<typeof ctx.deadlineMs, number>>();
    if (args.days === 0) {
      return Output.text('nothing to plan').withStructured({ summary: '' });
    }
    return { summary: `${args.days ?? 1} days in ${args.city}` };
  },
});

defineTool({
  name: 'wrong_output',
  description: 'Returns an object that does not fit its output schema.',
  input: {},
  output: { summary: s.string() },
  // @ts-expect-error `summary` must be a string.
  run: () => ({ summary: 3 }),
});

defineTool({
  name: 'no_such_field',
  description: 'Reads a field its input does not have.',
  input: { city: s.string() },
  run(args) {
    // @ts-expect-error `country` is not an argument.
    return args.country;
  },
});

defineTool({
  name: 'async_text',
  description: 'An async run returning text.',
  input: s.object({ n: s.number() }),
  run: async ({ n }) => `${n * 2}`,
});

export const tool = toolbox(plan);
