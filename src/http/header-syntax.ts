// HTTP header syntax as Node checks it before writing one: a name is an RFC 9110 §5.1 token, a value
// (§5.5) holds no control character but tab.
export const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
export const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/
