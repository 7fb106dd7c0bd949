// A tool some other plugin mounts for every agent (registered globally, as a profile's third-party
// plugin may): dshloop's fresh-run boundary must refuse it unless an operator allows it by name.
export const name = 'dshloop-tests-third-party-tool'
export const inject = ['tools']

export function apply(ctx) {
  ctx.effect(() => ctx.tools.register({
    name: 'thirdparty_echo',
    description: 'Echo the given text back (a third-party tool in dshloop\'s tests).',
    parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
    output: { schema: {}, render: (_args, value) => [{ type: 'text', text: JSON.stringify(value) }] },
    async execute(args) {
      return { echo: String(args?.text ?? '') }
    },
  }), 'third-party echo tool')
}
