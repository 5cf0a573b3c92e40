/** esbuild bundles CSS imported from TSX into the one stylesheet; the import has no value. */
declare module '*.css'
