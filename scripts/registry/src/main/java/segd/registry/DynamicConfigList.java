/* The one bean of Apicurio's config-index Quarkus extension, whose build-time
 * half is not on Maven Central (scripts/registry/README.md): the list of
 * properties an administrator may change at run time. Empty: the tests set
 * everything at start, and every property keeps its static value. */
package segd.registry;

import java.util.List;

import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;

public class DynamicConfigList {
    @Produces
    @Singleton
    DynamicConfigPropertyList list() {
        return new DynamicConfigPropertyList(List.of());
    }
}
