/**
 * The JSON Schema of scenario files (draft-07, validated with ajv). It checks shapes, types and
 * ranges; what it cannot express (length distributions, loopback targets, the embedded Sluice
 * config, per-kind keys) is `scenario-checks.ts`. Keys are snake_case like every Sluice YAML file.
 */

const NAME = {
  type: 'string',
  pattern: '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$',
  patternErrorMessage:
    "must be a name of at most 63 letters, digits, '_', '.' or '-', starting with a letter or digit",
};

const DIST = {
  description:
    'A length distribution: a number (fixed), a preset name (azure-conversation-input, azure-conversation-output, azure-code-input, azure-code-output) or {dist: fixed|uniform|lognormal|empirical, ...}.',
};

function loadSchema(required: string[]): Record<string, unknown> {
  return {
    description: 'How traffic is driven.',
    type: 'object',
    additionalProperties: false,
    required,
    properties: {
      mode: {
        description:
          'open: a fixed arrival rate, latency from the intended send time; closed: N connections, each sends when its previous answer is complete.',
        type: 'string',
        enum: ['open', 'closed'],
      },
      rate: {
        description: 'Open loop: arrivals per second (all tenants without their own rate).',
        type: 'number',
        minimum: 0.001,
        maximum: 100000,
      },
      arrivals: {
        description: 'Open loop: uniform (evenly spaced) or poisson gaps. Default uniform.',
        type: 'string',
        enum: ['uniform', 'poisson'],
      },
      connections: {
        description: 'Closed loop: concurrent connections. Default 16.',
        type: 'integer',
        minimum: 1,
        maximum: 10000,
      },
      max_in_flight: {
        description:
          'Open loop: most requests in flight; arrivals beyond are counted as client_overflow errors. Default 4096.',
        type: 'integer',
        minimum: 1,
        maximum: 100000,
      },
    },
  };
}

function fleetSchema(required: string[]): Record<string, unknown> {
  return {
    description: 'Simulated GPU nodes started for the run (see docs/simulator.md).',
    type: 'object',
    additionalProperties: false,
    required,
    properties: {
      nodes: { description: 'Number of nodes.', type: 'integer', minimum: 1, maximum: 64 },
      profile: {
        description:
          'Profile name in loadtest/profiles/ or a YAML path (relative to the scenario). Default llama-8b-h100-bf16.',
        type: 'string',
        minLength: 1,
      },
      profile_overrides: {
        description: 'Profile keys replaced for this run (e.g. max_running: 4).',
        type: 'object',
      },
      speed_factors: {
        description: 'Speed factor per node (modelled times are divided by it); missing entries are 1.',
        type: 'array',
        items: { type: 'number', minimum: 0.001, maximum: 1000 },
      },
      process: {
        description:
          'in-process: nodes run inside the load generator (stats read directly); child: in a `sluice sim` child process (stats read from /metrics). Default in-process.',
        type: 'string',
        enum: ['in-process', 'child'],
      },
    },
  };
}

const SLUICE = {
  description:
    'A Sluice started as a child process (`sluice serve --config FILE --no-watch`); null sends traffic straight to the fleet.',
  type: ['object', 'null'],
  additionalProperties: false,
  properties: {
    config: {
      description:
        'Inline config YAML; {{nodes}}, {{node_urls}}, {{node_url.N}}, {{port}}, {{admin_port}} are filled in.',
      type: 'string',
      minLength: 1,
    },
    config_file: {
      description: 'Path of a config file (relative to the scenario), with the same placeholders.',
      type: 'string',
      minLength: 1,
    },
    listener: {
      description: 'Name of the listener to send traffic to. Default: the first.',
      type: 'string',
      minLength: 1,
    },
    instances: {
      description:
        'Sluice processes started with the same config (each on its own ports, sharing nothing); the client sends to them in turn. Default 1.',
      type: 'integer',
      minimum: 1,
      maximum: 8,
    },
  },
};

/** The scenario file schema. */
export const SCENARIO_SCHEMA: Record<string, unknown> = {
  $schema: 'http://json-schema.org/draft-07/schema#',
  title: 'Sluice load-test scenario',
  type: 'object',
  additionalProperties: false,
  required: ['name', 'workload', 'load'],
  properties: {
    name: { description: 'Scenario name; names the result files.', ...NAME },
    description: { description: 'Free text: what the scenario measures.', type: 'string' },
    seed: {
      description: 'Seed of every random choice. Default 1.',
      type: 'integer',
      minimum: 0,
      maximum: 4294967295,
    },
    duration_s: {
      description: 'Measured phase in seconds (a hard cap). Default 10.',
      type: 'number',
      minimum: 0.1,
      maximum: 3600,
    },
    warmup_s: {
      description: 'Unmeasured phase before it, in seconds. Default 0.',
      type: 'number',
      minimum: 0,
      maximum: 600,
    },
    drain_s: {
      description:
        'After the measured phase, how long requests in flight may finish before they are cut, in seconds. Default 10.',
      type: 'number',
      minimum: 0,
      maximum: 600,
    },
    max_requests: {
      description: 'Most requests sent in the measured phase (a hard cap). Default 1000000.',
      type: 'integer',
      minimum: 1,
      maximum: 100000000,
    },
    timeout_ms: {
      description: 'Per-request timeout in milliseconds. Default 60000.',
      type: 'integer',
      minimum: 1,
      maximum: 3600000,
    },
    load: loadSchema(['mode']),
    fleet: fleetSchema(['nodes']),
    sluice: SLUICE,
    target: {
      description: 'Base URL of an already running target (loopback only), instead of a fleet.',
      type: 'string',
      minLength: 1,
    },
    node_metrics: {
      description:
        'With target: base URLs of simulated nodes whose /metrics are read for utilisation and cache hits.',
      type: 'array',
      items: { type: 'string', minLength: 1 },
    },
    variants: {
      description:
        'Named variants run in turn (or one with --variant); each may replace sluice and override load and fleet keys.',
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['name'],
        properties: {
          name: NAME,
          description: { type: 'string' },
          sluice: SLUICE,
          load: loadSchema([]),
          fleet: fleetSchema([]),
        },
      },
    },
    workload: {
      description: 'What the requests look like.',
      type: 'object',
      additionalProperties: false,
      required: ['mix'],
      properties: {
        model: {
          description:
            "Model name in chat requests. Default: the fleet profile's chat_model, else 'default'.",
          type: 'string',
          minLength: 1,
        },
        embedding_model: {
          description: "Model name in embedding requests. Default: the profile's embedding_model.",
          type: 'string',
          minLength: 1,
        },
        sessions: {
          description: 'Concurrent chat sessions per tenant. Default 64.',
          type: 'integer',
          minimum: 1,
          maximum: 100000,
        },
        session_zipf: {
          description:
            'Popularity of the session slots: an arrival starts its search for a free session at slot k with probability proportional to 1 / (k + 1)^session_zipf (a few hot conversations). 0: uniform. Default 0.',
          type: 'number',
          minimum: 0,
          maximum: 10,
        },
        tenants: {
          description:
            'Callers; each request carries its tenant key as Authorization: Bearer. Default: one anonymous tenant.',
          type: 'array',
          minItems: 1,
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['name'],
            properties: {
              name: NAME,
              api_key: {
                description: 'Sent as Authorization: Bearer KEY (with -i appended when count > 1).',
                type: 'string',
                minLength: 1,
              },
              rate: {
                description: 'Open loop: this tenant’s arrivals per second (each of count).',
                type: 'number',
                minimum: 0.001,
                maximum: 100000,
              },
              weight: {
                description:
                  'Closed loop (and open loop without rates): relative share of requests. Default: rate, else 1.',
                type: 'number',
                minimum: 0.001,
                maximum: 1000000,
              },
              count: {
                description: 'Expands to this many tenants NAME-0..NAME-(count-1). Default 1.',
                type: 'integer',
                minimum: 1,
                maximum: 10000,
              },
            },
          },
        },
        mix: {
          description: 'Kinds of requests with relative weights.',
          type: 'array',
          minItems: 1,
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['kind'],
            properties: {
              kind: {
                description: 'chat (multi-turn sessions) or embedding (single inputs, in bursts).',
                type: 'string',
                enum: ['chat', 'embedding'],
              },
              weight: {
                description: 'Relative share of arrivals. Default 1.',
                type: 'number',
                minimum: 0.001,
                maximum: 1000000,
              },
              stream: {
                description:
                  'chat: stream the answer (SSE) and measure TTFT and inter-token gaps. Default true.',
                type: 'boolean',
              },
              system_prompt_tokens: {
                description: 'chat: length of the shared system prompt in tokens (0 = none). Default 0.',
                type: 'integer',
                minimum: 0,
                maximum: 1000000,
              },
              system_prompts: {
                description: 'chat: number of distinct system prompts sessions pick from. Default 1.',
                type: 'integer',
                minimum: 1,
                maximum: 100000,
              },
              turns: {
                ...DIST,
                description: 'chat: turns per session (history grows each turn). Default 1.',
              },
              user_tokens: {
                ...DIST,
                description: 'chat: tokens of each user message. Default azure-conversation-input.',
              },
              output_tokens: {
                ...DIST,
                description: 'chat: max_tokens of each request. Default azure-conversation-output.',
              },
              hot_key: {
                description:
                  'chat: a share of requests that all carry one session key and system prompt (a hot key).',
                type: 'object',
                additionalProperties: false,
                required: ['share'],
                properties: {
                  share: { type: 'number', minimum: 0, maximum: 1 },
                  key: { type: 'string', minLength: 1 },
                },
              },
              repeat: {
                description:
                  'chat: single-turn temperature-0 requests drawn from a fixed set of distinct prompts with Zipf popularity (the most popular first), so identical requests recur (a cache workload). Each prompt keeps its user text and max_tokens.',
                type: 'object',
                additionalProperties: false,
                required: ['distinct'],
                properties: {
                  distinct: {
                    description: 'Number of distinct prompts.',
                    type: 'integer',
                    minimum: 1,
                    maximum: 10000000,
                  },
                  zipf: {
                    description: 'Zipf exponent of prompt popularity (0 = uniform). Default 1.',
                    type: 'number',
                    minimum: 0,
                    maximum: 5,
                  },
                },
              },
              burst: {
                description:
                  'Open loop: requests sent together per arrival (chat: each a turn of its own session, e.g. a burst of new conversations). Default 1.',
                type: 'integer',
                minimum: 1,
                maximum: 1024,
              },
              input_tokens: { ...DIST, description: 'embedding: tokens of each input. Default 256.' },
              items: {
                description: 'embedding: inputs per request. Default 1.',
                type: 'integer',
                minimum: 1,
                maximum: 2048,
              },
            },
          },
        },
      },
    },
  },
};
