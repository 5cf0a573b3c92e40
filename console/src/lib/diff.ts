// The line diff is shared with the CLI, which shows what a proposal replaces; it lives with the pure code.
export * from '../../../src/core/line-diff.js'
