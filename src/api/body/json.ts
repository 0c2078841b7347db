/** The values a decoded body holds: JSON, with numbers kept as their exact text (number.ts). */
import type { JsonNumber } from './number'

export type JsonValue = null | boolean | string | JsonNumber | JsonValue[] | JsonObject
export interface JsonObject { [key: string]: JsonValue }
