package dev.ikkai.outbox;

import org.apache.avro.Schema;

/**
 * Checks, before Avro reads a value, that every length and count in its bytes fits in what is left of
 * them: Avro allocates a string, bytes, array or map of the size the data claims, so a 57-byte value
 * that claims a 1.5 GB string would be an OutOfMemoryError in the task. Walks the writer schema over
 * the bytes without allocating anything of the data's choosing. Pure.
 *
 * <p>Rules: a string, bytes or fixed fits in the bytes left; an array or map block count is at most
 * the bytes left (each item takes at least one byte in any schema the catalog or an emitter uses; a
 * larger count is refused even for zero-byte items, which no outbox request has); a union index and an
 * enum ordinal name a branch or symbol that exists; a varint ends within 10 bytes; schemas nest at most
 * {@link #MAX_DEPTH} deep.
 */
final class AvroBounds {
    static final int MAX_DEPTH = 64;

    private final byte[] data;
    private int pos;

    private AvroBounds(byte[] data, int offset) {
        this.data = data;
        this.pos = offset;
    }

    /** Throws if {@code data} from {@code offset} on cannot be a value of {@code writer} of the size it claims. */
    static void check(Schema writer, byte[] data, int offset) throws RejectedRequest {
        try {
            new AvroBounds(data, offset).value(writer, 0);
        } catch (Invalid e) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE, "not a " + writer.getFullName() + " in Avro binary: "
                + e.getMessage());
        }
    }

    private void value(Schema schema, int depth) throws Invalid {
        if (depth > MAX_DEPTH) {
            throw new Invalid("nested deeper than " + MAX_DEPTH + " at byte " + pos);
        }
        switch (schema.getType()) {
            case NULL -> { }
            case BOOLEAN -> skip(1, "a boolean");
            case INT, LONG -> varint();
            case FLOAT -> skip(4, "a float");
            case DOUBLE -> skip(8, "a double");
            case FIXED -> skip(schema.getFixedSize(), "a fixed");
            case STRING, BYTES -> {
                long length = varint();
                if (length < 0 || length > remaining()) {
                    throw new Invalid("a " + schema.getType().getName() + " at byte " + pos + " claims " + length
                        + " bytes, but " + remaining() + " are left");
                }
                pos += (int) length;
            }
            case ENUM -> index(schema.getEnumSymbols().size(), "enum symbol");
            case UNION -> value(schema.getTypes().get(index(schema.getTypes().size(), "union branch")), depth + 1);
            case RECORD -> {
                for (Schema.Field field : schema.getFields()) {
                    value(field.schema(), depth + 1);
                }
            }
            case ARRAY, MAP -> {
                while (true) {
                    long count = varint();
                    if (count == 0) {
                        break;
                    }
                    if (count < 0) {  // a negative count is followed by the block's size in bytes
                        count = -count;
                        long size = varint();
                        if (count < 0 || size < 0 || size > remaining()) {
                            throw new Invalid("a block at byte " + pos + " claims " + size + " bytes, but " + remaining()
                                + " are left");
                        }
                    }
                    if (count > remaining()) {
                        throw new Invalid("a block at byte " + pos + " claims " + count + " items, but " + remaining()
                            + " bytes are left");
                    }
                    for (long i = 0; i < count; i++) {
                        if (schema.getType() == Schema.Type.MAP) {
                            value(Schema.create(Schema.Type.STRING), depth + 1);
                            value(schema.getValueType(), depth + 1);
                        } else {
                            value(schema.getElementType(), depth + 1);
                        }
                    }
                }
            }
            default -> throw new Invalid("unexpected schema type " + schema.getType());
        }
    }

    private int index(int size, String what) throws Invalid {
        int at = pos;
        long index = varint();
        if (index < 0 || index >= size) {
            throw new Invalid("the " + what + " at byte " + at + " is " + index + ", but there are " + size);
        }
        return (int) index;
    }

    private int remaining() {
        return data.length - pos;
    }

    private void skip(int n, String what) throws Invalid {
        if (n > remaining()) {
            throw new Invalid(what + " at byte " + pos + " needs " + n + " bytes, but " + remaining() + " are left");
        }
        pos += n;
    }

    /** A zig-zag varint (Avro's int and long). */
    private long varint() throws Invalid {
        long raw = 0;
        for (int shift = 0; shift < 70; shift += 7) {
            if (pos >= data.length) {
                throw new Invalid("truncated: the value ends inside a number at byte " + pos);
            }
            int b = data[pos++] & 0xff;
            raw |= (long) (b & 0x7f) << shift;
            if ((b & 0x80) == 0) {
                return (raw >>> 1) ^ -(raw & 1);
            }
        }
        throw new Invalid("a number longer than 10 bytes at byte " + pos);
    }

    private static final class Invalid extends Exception {
        private static final long serialVersionUID = 1L;

        Invalid(String message) {
            super(message, null, false, false);
        }
    }
}
