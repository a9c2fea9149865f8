import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;

// WhichServer connects with pgjdbc to the JDBC URL args[0], runs the query
// args[1] and prints its one value, then how long the connection and the
// query took in milliseconds (the JVM's own start left out).
public class WhichServer {
    public static void main(String[] args) throws Exception {
        long start = System.nanoTime();
        try (Connection c = DriverManager.getConnection(args[0]);
             ResultSet r = c.createStatement().executeQuery(args[1])) {
            r.next();
            System.out.println(r.getString(1));
        }
        System.out.println((System.nanoTime() - start) / 1_000_000);
    }
}
