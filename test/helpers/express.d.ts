// express 5 ships without types and only the A2A SDK's servers in test helpers use it: an untyped module.
declare module 'express'
