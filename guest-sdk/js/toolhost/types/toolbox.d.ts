/// <reference path="./interfaces/toolhost-tool-host.d.ts" />
/// <reference path="./interfaces/toolhost-tool-tool.d.ts" />
/// <reference path="./interfaces/toolhost-tool-tools.d.ts" />
/// <reference path="./interfaces/toolhost-tool-types.d.ts" />
/// <reference path="./interfaces/wasi-clocks-monotonic-clock.d.ts" />
/// <reference path="./interfaces/wasi-http-outgoing-handler.d.ts" />
/// <reference path="./interfaces/wasi-http-types.d.ts" />
/// <reference path="./interfaces/wasi-io-error.d.ts" />
/// <reference path="./interfaces/wasi-io-poll.d.ts" />
/// <reference path="./interfaces/wasi-io-streams.d.ts" />
/// <reference path="./interfaces/wasi-keyvalue-atomics.d.ts" />
/// <reference path="./interfaces/wasi-keyvalue-batch.d.ts" />
/// <reference path="./interfaces/wasi-keyvalue-store.d.ts" />
declare module 'toolhost:tool/toolbox@0.2.1' {
  export type * as ToolhostToolHost021 from 'toolhost:tool/host@0.2.1'; // import toolhost:tool/host@0.2.1
  export type * as ToolhostToolTools021 from 'toolhost:tool/tools@0.2.1'; // import toolhost:tool/tools@0.2.1
  export type * as ToolhostToolTypes021 from 'toolhost:tool/types@0.2.1'; // import toolhost:tool/types@0.2.1
  export type * as WasiClocksMonotonicClock0212 from 'wasi:clocks/monotonic-clock@0.2.12'; // import wasi:clocks/monotonic-clock@0.2.12
  export type * as WasiHttpOutgoingHandler0212 from 'wasi:http/outgoing-handler@0.2.12'; // import wasi:http/outgoing-handler@0.2.12
  export type * as WasiHttpTypes0212 from 'wasi:http/types@0.2.12'; // import wasi:http/types@0.2.12
  export type * as WasiIoError0212 from 'wasi:io/error@0.2.12'; // import wasi:io/error@0.2.12
  export type * as WasiIoPoll0212 from 'wasi:io/poll@0.2.12'; // import wasi:io/poll@0.2.12
  export type * as WasiIoStreams0212 from 'wasi:io/streams@0.2.12'; // import wasi:io/streams@0.2.12
  export type * as WasiKeyvalueAtomics020Draft from 'wasi:keyvalue/atomics@0.2.0-draft'; // import wasi:keyvalue/atomics@0.2.0-draft
  export type * as WasiKeyvalueBatch020Draft from 'wasi:keyvalue/batch@0.2.0-draft'; // import wasi:keyvalue/batch@0.2.0-draft
  export type * as WasiKeyvalueStore020Draft from 'wasi:keyvalue/store@0.2.0-draft'; // import wasi:keyvalue/store@0.2.0-draft
  export * as tool from 'toolhost:tool/tool@0.2.1'; // export toolhost:tool/tool@0.2.1
}
